// sy::python::Model: a model opened for the Python API's switchyard.Model. It holds what
// `switchyard generate` and `switchyard chat` open (launcher/inference_session.h: the backend, the
// expert policy's provider, the model), the model's tokenizer and chat template when it has them,
// its end-of-sequence tokens, and one generate engine driven by its own thread
// (inference/engine_thread.h), so that a Python thread only submits and reads and the engine runs
// with the interpreter's lock released.
//
// The context (prompt + answer) is fixed at Load: ModelOptions::ctx_size, else the model's own up
// to 4096 tokens (the CLI's OpenEndedContext); the engine's KV cache holds max_batch sequences of
// it. Requests from several Python threads join the running batch (continuous batching) up to
// max_batch, and wait for a slot past it.
//
// Ownership: owns the session, the tokenizer, the template and the engine thread; the engine
// thread goes first (it borrows the session's model and provider). An AnswerStream that Generate
// returns borrows the tokenizer: the Python binding keeps the Model alive while a stream lives.
// Thread-safety: every const member and Generate, Logits and Perplexity may be called from any
// thread (the engine thread serialises the work).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inference/answer_stream.h"
#include "inference/chat_template.h"
#include "inference/engine_thread.h"
#include "inference/perplexity.h"
#include "inference/sampler.h"
#include "inference/token_constraint.h"
#include "inference/tokenizer.h"
#include "launcher/command.h"
#include "launcher/inference_session.h"
#include "runtime/core/status.h"

namespace sy::python {

struct ModelOptions {
  // model_path (a directory, GGUF file, checkpoint, or ORG/NAME in the Hugging Face cache),
  // device, threads, policy and its options. `tokenizer` is ignored: the tokenizer is loaded when
  // the source has one.
  launcher::InferenceOptions inference;
  // dtype ("auto": the model's torch_dtype, or the GGUF's types) and the experts' quantization.
  launcher::InferenceFlags flags;
  int64_t ctx_size = 0;  // tokens of context per sequence; 0: the model's, at most 4096
  int max_batch = 1;     // sequences the engine runs together, >= 1
};

class Model {
 public:
  // Opens the model. Errors: those of InferenceSession::Open and of the tokenizer and template
  // files (a source without them is fine: text then raises, token ids work); InvalidArgument for
  // a max_batch below 1 or a ctx_size below 2.
  static Result<std::unique_ptr<Model>> Load(ModelOptions options);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  int64_t context() const { return context_; }
  int64_t vocab_size() const;
  const std::vector<int32_t>& eos_token_ids() const { return eos_; }
  // "Mixtral-style, 2 layers, ..." (InferenceSession::Describe), the source's path and device.
  std::string Describe() const;
  const std::string& path() const { return session_->path(); }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  bool has_chat_template() const { return chat_template_.has_value(); }

  // FailedPrecondition when the model has no tokenizer, naming the path and what to pass instead.
  Result<std::vector<int32_t>> Tokenize(std::string_view text) const;
  Result<std::string> Detokenize(std::span<const int32_t> ids) const;
  // The prompt text of `messages` through the model's chat template, ending with the assistant's
  // header; `kwargs_json` ("" or a JSON object) adds template variables (Qwen3's
  // enable_thinking). FailedPrecondition when the model has no chat template.
  Result<std::string> RenderChat(std::span<const ChatMessageText> messages,
                                 std::string_view kwargs_json) const;

  // Submits a request and returns its answer as it is drawn. `sampling.max_new_tokens` below 0:
  // until an end-of-sequence token or the context is full. The model's end-of-sequence tokens end
  // the answer unless `ignore_eos`; `stop` strings cut its text. InvalidArgument when the prompt
  // is empty, holds an id outside the vocabulary, or leaves no room for max_new_tokens in the
  // context (naming both); the sampler's errors.
  // `response_format` ("", or the OpenAI API's {"type": "json_object"} or {"type": "json_schema",
  // "json_schema": {"schema": ...}} as JSON text) constrains the answer as `switchyard serve`
  // does (inference/token_constraint.h); it needs a tokenizer and an end-of-sequence token.
  Result<std::unique_ptr<AnswerStream>> Generate(std::vector<int32_t> prompt,
                                                 SamplerOptions sampling,
                                                 std::vector<std::string> stop, bool ignore_eos,
                                                 std::string_view response_format = "");
  // The logits of every position of `ids`, f32 [ids.size(), vocab_size] row-major.
  Result<std::vector<float>> Logits(std::vector<int32_t> ids);
  // Perplexity over `ids` in chunks of options.context (inference/perplexity.h), at most the
  // model's context.
  Result<QualityReport> Perplexity(std::vector<int32_t> ids, const QualityOptions& options);

 private:
  Model() = default;
  Status CheckIds(std::span<const int32_t> ids, const char* what) const;
  // The constraint of a response_format (null for text).
  Result<std::shared_ptr<GrammarConstraint>> Constraint(std::string_view response_format,
                                                        bool ignore_eos);

  std::unique_ptr<launcher::InferenceSession> session_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::vector<int32_t> eos_;
  int64_t context_ = 0;
  ConstraintVocabularyCache vocabulary_;  // response_format's token bytes
  // Declared last: destroyed first, while the session it borrows lives.
  std::unique_ptr<EngineThread> engine_;
};

}  // namespace sy::python
