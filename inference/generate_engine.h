// GenerateEngine: the one generate loop. Every command that generates text or tokens (generate,
// bench decode, bench infer, train-predictor, serve) runs its requests through it.
//
// A request is a prompt plus its sampling settings (inference/sampler.h: temperature 0 is
// greedy, top-k, top-p, seed, max_new_tokens, stop tokens). The engine keeps up to max_batch
// requests running in the slots of one KvCacheDecoder (inference/kv_cache_decoder.h) and moves
// them at token boundaries (continuous batching):
//
//   SY_ASSIGN_OR_RETURN(auto engine, GenerateEngine::Create(model, &provider, {.max_batch = 4,
//                                                           .max_context = 512}));
//   SY_ASSIGN_OR_RETURN(int64_t id, engine->Submit(request, on_token));
//   while (!engine->idle()) SY_RETURN_IF_ERROR(engine->Step());
//
//   Step() = Prefill(): every waiting request that finds a free slot has its prompt prefilled and
//            draws its first token;
//          + Decode(): one decode step of every running request, together (one [R, H] pass per
//            layer), each drawing its next token.
// A request ends when it draws a stop token or reaches max_new_tokens (StopCondition), or when
// its callback returns false (cancelled); its slot is free for the next one at once.
// Generate() runs one request to the end; Beam() is beam search (inference/beam_search.h).
//
// Callbacks run on the calling thread, inside Prefill/Decode, after the token is drawn: a
// TokenEvent names the request, the token, its index and the logits row it came from (valid
// during the call), and says on the last token why the request ended.
//
// Ownership: borrows the model and the provider (both must outlive the engine); owns the decoder.
// Thread-safety: one thread at a time (the thread that drives the backend's compute stream), except
// Check, which any thread may call. A server feeds it from one engine thread
// (inference/engine_thread.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "inference/beam_search.h"
#include "inference/expert_provider.h"
#include "inference/kv_cache_decoder.h"
#include "inference/sampler.h"
#include "inference/token_constraint.h"
#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy {

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids; not empty
  // Sampling and stopping. max_new_tokens 0 runs the prompt only (its logits, no token).
  SamplerOptions sampling;
  // When set, receives the logits of every prompt position, f32 [prompt, vocab].
  std::vector<float>* prompt_logits = nullptr;
  // -1: none. Else EngineThread reports each token's log-probability and this many most likely
  // alternatives (0 .. kMaxTopLogprobs; inference/token_logprobs.h) with it. The engine itself
  // ignores it (a TokenCallback has the logits).
  int32_t logprobs = -1;
  // When set, each token is drawn from the logits with every token the constraint refuses at
  // -infinity (inference/token_constraint.h: JSON output); the TokenEvent's logits are the masked
  // ones. The request owns its constraint's state: one constraint per request.
  std::shared_ptr<GrammarConstraint> constraint;
};

struct TokenEvent {
  int64_t request = 0;  // the id Submit returned
  int32_t token = 0;
  int64_t index = 0;                    // 0 for the request's first generated token
  StopReason stop = StopReason::kNone;  // why the request ends with this token, or kNone
  std::span<const float> logits;        // the row the token was drawn from (during the call)
};
// Called for every generated token; return false to cancel the request after this token.
using TokenCallback = std::function<bool(const TokenEvent&)>;

// What a request ended as.
enum class FinishReason : uint8_t { kStopToken, kMaxTokens, kCancelled, kPromptOnly };

struct Generation {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kMaxTokens;
  double ttft_seconds = 0.0;  // from Submit to the first token (or to the end of the prompt)
};

// Totals since Create.
struct GenerateStats {
  int64_t requests = 0;          // finished
  int64_t prompt_tokens = 0;     // prefilled
  int64_t generated_tokens = 0;  // drawn (the first token of each request included)
  int64_t decode_steps = 0;      // Decode passes over the running batch
  int64_t decode_tokens = 0;     // tokens those passes produced
  double prefill_seconds = 0.0;  // inside Prefill
  double decode_seconds = 0.0;   // inside Decode
};

struct EngineOptions {
  int max_batch = 1;        // requests running at once (decoder slots). Default: 1
  int64_t max_context = 0;  // most tokens of one request, prompt + generated. Required, >= 1
};

class GenerateEngine {
 public:
  // InvalidArgument for max_batch < 1 or max_context < 1; ResourceExhausted when the KV cache does
  // not fit; the provider is installed on `model` when it is not yet (see KvCacheDecoder).
  static Result<std::unique_ptr<GenerateEngine>> Create(MoeModel& model, ExpertProvider* provider,
                                                        const EngineOptions& options);

  // OK when Submit would take `request`; else InvalidArgument (naming the field) for bad sampling
  // options, an empty prompt, an id outside the vocabulary, or prompt + max_new_tokens past
  // max_context. Reads only what Create fixed (the model config and the options), so unlike
  // everything else here it may run on any thread, beside the engine's own (a server checks a
  // request on the thread that received it).
  Status Check(const GenerateRequest& request) const;
  // Queues a request and returns its id; the errors of Check. Nothing runs until Prefill/Step.
  Result<int64_t> Submit(GenerateRequest request, TokenCallback on_token = {});
  // Starts the waiting requests that find a free slot (prefill, first token).
  Status Prefill();
  // One decode step of every running request that has not ended.
  Status Decode();
  // Prefill, then Decode when a request is running.
  Status Step();
  // Ends request `id` (waiting or running) at the next token boundary; false if unknown.
  bool Cancel(int64_t id);

  bool idle() const { return waiting_.empty() && running() == 0; }
  int running() const;
  int waiting() const { return static_cast<int>(waiting_.size()); }
  // Tokens held in the KV cache by the running requests (prompt and generated).
  int64_t cached_tokens() const;
  // The result of a finished request, once (later calls: nullopt).
  std::optional<Generation> TakeResult(int64_t id);

  // Submit + Step until it ends: one request to the end.
  Result<Generation> Generate(GenerateRequest request, TokenCallback on_token = {});
  // Beam search over this engine's model and provider (its own decoder; inference/beam_search.h).
  Result<std::vector<BeamHypothesis>> Beam(std::span<const int32_t> prompt,
                                           const BeamSearchOptions& options);

  const GenerateStats& stats() const { return stats_; }
  const EngineOptions& options() const { return options_; }
  KvCacheDecoder& decoder() { return *decoder_; }
  MoeModel& model() { return model_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    int64_t id = 0;
    GenerateRequest request;
    TokenCallback on_token;
    std::optional<Sampler> sampler;
    std::optional<StopCondition> stop;
    Generation result;
    Clock::time_point submitted;
    int32_t last_token = 0;
    bool cancelled = false;
    bool done = false;
    std::vector<float> masked;  // the constrained row the token is drawn from
  };
  GenerateEngine(MoeModel& model, ExpertProvider* provider, const EngineOptions& options,
                 std::unique_ptr<KvCacheDecoder> decoder);
  // Draws slot `slot`'s next token from `logits`, reports it, and ends the request if it stops.
  void Draw(int slot, std::span<const float> logits);
  void Finish(int slot, FinishReason reason);

  MoeModel& model_;
  ExpertProvider* provider_;
  EngineOptions options_;
  std::unique_ptr<KvCacheDecoder> decoder_;
  int64_t next_id_ = 1;
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> slots_;  // [max_batch]; null: free
  std::vector<std::pair<int64_t, Generation>> finished_;
  GenerateStats stats_;
  // Reused by every decode step.
  std::vector<int> step_slots_;
  std::vector<int32_t> step_tokens_;
};

}  // namespace sy
