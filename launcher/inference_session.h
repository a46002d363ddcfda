// InferenceSession: a model opened for inference, with everything a command that generates needs
// around it: the backend (device, threads, sim link), the expert provider of the chosen policy
// (inference/expert_policy.h), the model itself from any source this build reads, and its
// tokenizer when the source has one. `generate`, `train-predictor` and `serve` open one and hand
// it to the generate engine (inference/generate_engine.h).
//
// Sources: a Hugging Face model directory (config.json + safetensors: inference/model_loader.h)
// or a Switchyard training checkpoint (a step-*.h5 file, or its checkpoint.dir: the latest step;
// launcher/training/trained_model.h). With a policy other than resident, a Hugging Face
// checkpoint's routed experts are loaded into pinned host memory, never onto the device
// (LoadOptions::experts_on_host), and the provider fetches them from there.
//
// Ownership: the session owns the backend, provider, model and tokenizer; members are declared so
// that the model goes first, then the provider (which the model's layers point at), then the
// backend (whose memory both hold). Thread-safety: one thread at a time (the backend's compute
// thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/expert_provider.h"
#include "inference/tokenizer.h"
#include "runtime/backend/backend.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy::launcher {

struct InferenceOptions {
  std::string model_path;            // required: see the top
  std::string device = "cpu";        // cpu, sim or cuda:N. Default: cpu
  DType weight_dtype = DType::kF32;  // Default: f32
  // The routed experts' dtype (LoadOptions::expert_dtype: q8_0 and q4_0 quantize them while
  // the rest stays in weight_dtype); unset: a GGUF's quantized experts as stored, else
  // weight_dtype. Hugging Face directories and GGUF files only. Default: unset
  std::optional<DType> expert_dtype;
  // A GGUF's quantized attention projections, dense FFNs and LM head stay in their blocks
  // (LoadOptions::keep_quantized_matrices); false (--quantize given): in weight_dtype.
  // Default: true
  bool keep_quantized_matrices = true;
  int threads = 0;                     // cpu backend threads; 0: SY_NUM_THREADS or all cores
  SimOptions sim;                      // the sim device's memory and link
  std::string policy = "resident";     // expert policy. Default: resident
  ExpertPolicyOptions policy_options;  // slots, cache, profile, predictor
  bool pregate = false;                // load a HF checkpoint as a pre-gated model
  bool tokenizer = false;              // load the source's tokenizer (required when set)
  // Hugging Face directories: called as the weights load (LoadOptions::progress). Default: none.
  std::function<void(int64_t done, int64_t total)> load_progress;
};

class InferenceSession {
 public:
  // Opens the model. Errors name the path and what to do: NotFound, DataLoss, InvalidArgument
  // (bad options: an unknown policy or device, --pregate on a training checkpoint). `provider`,
  // when given, replaces the policy's provider (a recorder, for instance); it must keep the
  // experts on the device (resident loading).
  static Result<std::unique_ptr<InferenceSession>> Open(
      const InferenceOptions& options, std::unique_ptr<ExpertProvider> provider = nullptr);

  Backend& backend() { return *backend_; }
  ExpertProvider& provider() { return *provider_; }
  MoeModel& model() { return *model_; }
  // Null unless InferenceOptions::tokenizer.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The text file at `path` read and encoded with the tokenizer (which must be loaded: checked);
  // errors name `flag` and the path ("--text wiki.txt: ...").
  Result<std::vector<int32_t>> EncodeTextFile(const std::string& path, std::string_view flag) const;
  // The longest sequence the model was made for (max_position_embeddings, or the trained
  // seq_len); 0 when the source does not say.
  int64_t trained_context() const { return trained_context_; }
  // For people: "Mixtral-style, 2 layers, 4 experts (top-2), hidden 64, 0.3 M parameters, bf16".
  std::string Describe() const;
  // The source: "Mixtral-style" or "Switchyard checkpoint (step 40)", and the file or directory.
  const std::string& kind() const { return kind_; }
  const std::string& path() const { return path_; }

 private:
  InferenceSession() = default;

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ExpertProvider> provider_;
  std::unique_ptr<MoeModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  DType weight_dtype_ = DType::kF32;
  int64_t trained_context_ = 0;
  std::string kind_;
  std::string path_;
};

}  // namespace sy::launcher
