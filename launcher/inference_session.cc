#include "launcher/inference_session.h"

#include <utility>

#include "inference/gguf_model.h"
#include "inference/model_loader.h"
#include "launcher/training/trained_model.h"
#include "runtime/core/check.h"
#include "runtime/core/read_file.h"
#include "runtime/model/dense_matrices.h"

namespace sy::launcher {

Result<std::unique_ptr<InferenceSession>> InferenceSession::Open(
    const InferenceOptions& options, std::unique_ptr<ExpertProvider> provider) {
  if (options.model_path.empty()) return InvalidArgumentError("no model path (--model)");
  SY_ASSIGN_OR_RETURN(Device device, ParseDevice(options.device));
  std::unique_ptr<InferenceSession> s(new InferenceSession());
  s->weight_dtype_ = options.weight_dtype;
  BackendOptions backend_options;
  backend_options.num_threads = options.threads;
  backend_options.sim = options.sim;
  SY_ASSIGN_OR_RETURN(s->backend_, CreateBackend(device, backend_options));
  const bool own_provider = provider == nullptr;
  if (own_provider) {
    SY_ASSIGN_OR_RETURN(s->provider_, MakeExpertProvider(options.policy, options.policy_options));
  } else {
    s->provider_ = std::move(provider);
  }
  if (IsTrainCheckpointPath(options.model_path)) {
    if (options.expert_dtype && *options.expert_dtype != options.weight_dtype) {
      return InvalidArgumentError(
          "--quantize experts reads a Hugging Face directory or a GGUF file; " +
          options.model_path +
          " is a Switchyard checkpoint: convert it first (switchyard convert --in " +
          options.model_path + " --out model.gguf --dtype q8_0)");
    }
    if (options.pregate) {
      return InvalidArgumentError("--pregate converts a Hugging Face checkpoint; " +
                                  options.model_path +
                                  " is a Switchyard checkpoint, whose model.pregate is set when "
                                  "it is trained");
    }
    SY_ASSIGN_OR_RETURN(TrainedModel trained,
                        LoadTrainedModel(*s->backend_, options.model_path, options.weight_dtype,
                                         options.load_progress));
    s->model_ = std::move(trained.model);
    s->kind_ = "Switchyard checkpoint (step " + std::to_string(trained.step) + ")";
    s->path_ = trained.path;
    s->trained_context_ = trained.config.data.seq_len;
  } else {
    LoadOptions load;
    load.weight_dtype = options.weight_dtype;
    load.expert_dtype = options.expert_dtype;
    load.keep_quantized_matrices = options.keep_quantized_matrices;
    load.pregate = options.pregate;
    load.experts_on_host = own_provider && options.policy != "resident";
    load.progress = options.load_progress;
    const bool gguf = IsGgufPath(options.model_path);
    SY_ASSIGN_OR_RETURN(LoadedModel loaded,
                        gguf ? LoadGgufModel(*s->backend_, options.model_path, load)
                             : LoadHfModel(*s->backend_, options.model_path, load));
    if (loaded.host_experts != nullptr) s->provider_->set_host_experts(loaded.host_experts);
    s->model_ = std::move(loaded.model);
    s->kind_ =
        std::string(HfFamilyDisplayName(loaded.hf.family)) + (gguf ? "-style GGUF" : "-style");
    s->path_ = options.model_path;
    s->trained_context_ = loaded.hf.max_position_embeddings;
  }
  SY_RETURN_IF_ERROR(s->provider_->Install(*s->model_));
  if (options.tokenizer) {
    SY_ASSIGN_OR_RETURN(s->tokenizer_, LoadTokenizer(options.model_path));
  }
  return s;
}

Result<std::vector<int32_t>> InferenceSession::EncodeTextFile(const std::string& path,
                                                              std::string_view flag) const {
  SY_CHECK(tokenizer_ != nullptr) << "EncodeTextFile without a tokenizer";
  const std::string context = std::string(flag) + " " + path;
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().WithContext(context);
  Result<std::vector<int32_t>> encoded = tokenizer_->Encode(*text);
  if (!encoded.ok()) return encoded.status().WithContext(context);
  return encoded;
}

std::string InferenceSession::Describe() const {
  std::string text =
      kind_ + ", " + model_->config().Summary() + ", " + std::string(DTypeName(weight_dtype_));
  if (!model_->options().expert_layer_dtypes.empty() ||
      model_->options().expert_dtype() != weight_dtype_) {
    text += ", experts " + DescribeExpertDTypes(*model_);
  }
  text += DescribeMatrixDTypes(model_->options().matrix_dtypes);
  return text;
}

}  // namespace sy::launcher
