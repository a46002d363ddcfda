#include "launcher/command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "inference/gguf_model.h"
#include "launcher/hf_cache.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/read_file.h"
#include "storage/formats/gguf.h"
#include "storage/formats/text_file.h"

namespace sy::launcher {

std::vector<CommandEntry>& CommandRegistry() {
  static std::vector<CommandEntry> registry;
  return registry;
}

CommandRegistrar::CommandRegistrar(std::string path, std::string help,
                                   std::function<std::unique_ptr<Command>()> make) {
  CommandRegistry().push_back({std::move(path), std::move(help), std::move(make)});
}

CLI::Validator IntegerRange(int64_t min, int64_t max) {
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        int64_t value = 0;
        if (!CLI::detail::lexical_cast(text, value) || value < min || value > max) {
          return text + " is not " + range;
        }
        return "";
      },
      range);
}

namespace {

// 1000000 rather than 1e+06; 0.001 as is.
std::string FormatBound(double value) {
  char text[48];
  std::snprintf(text, sizeof(text),
                value == std::floor(value) && std::fabs(value) < 1e15 ? "%.0f" : "%g", value);
  return text;
}

}  // namespace

CLI::Validator NumberRange(double min, double max) {
  const std::string text_range = "a number from " + FormatBound(min) + " to " + FormatBound(max);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !(value >= min && value <= max)) {
          return text + " is not " + text_range;
        }
        return "";
      },
      text_range);
}

void AddThreadsOption(CLI::App& app, int* threads) {
  app.add_option("-t,--threads", *threads,
                 "CPU threads for compute (default 0: SY_NUM_THREADS, else every core)")
      ->check(IntegerRange(0, 4096));
}

void AddJsonOptions(CLI::App& app, JsonOutput* out) {
  app.add_flag("--json", out->print, "Print the figures as JSON on stdout, in place of the text");
  app.add_option("--json-out", out->file, "Also write the figures as JSON to this file");
}

Result<bool> EmitJson(const JsonOutput& out, const std::string& json_text) {
  std::string text = json_text;
  if (text.empty() || text.back() != '\n') text += '\n';
  if (!out.file.empty()) SY_RETURN_IF_ERROR(WriteFileReplacing(out.file, text));
  if (!out.print) return false;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return true;
}

SamplerOptions GreedySampling() {
  SamplerOptions o;
  o.temperature = 0.0f;
  return o;
}

int64_t OpenEndedContext(int64_t ctx_size, int64_t trained) {
  constexpr int64_t kDefaultContext = 4096;
  if (ctx_size > 0) return ctx_size;
  return trained > 0 ? std::min(trained, kDefaultContext) : kDefaultContext;
}

void AddSamplingOptions(CLI::App& app, SamplerOptions* sampler) {
  app.add_option("--temperature", sampler->temperature, "0 = greedy (default 0)")
      ->check(NumberRange(0, 100));
  app.add_option("--top-k", sampler->top_k, "Keep the k most likely tokens (default 0 = off)")
      ->check(IntegerRange(0, INT32_MAX));
  app.add_option("--top-p", sampler->top_p, "Nucleus mass to keep (default 1 = off)")
      ->check(NumberRange(0, 1));
  app.add_option("--min-p", sampler->min_p,
                 "Drop tokens less likely than this times the most likely one (default 0 = off)")
      ->check(NumberRange(0, 1));
  app.add_option("--repeat-penalty,--repetition-penalty", sampler->repetition_penalty,
                 "Divide the logits of the prompt's and the answer's tokens by this (default 1 = "
                 "off)")
      ->check(NumberRange(0.01, 10));
  app.add_option("--presence-penalty", sampler->presence_penalty,
                 "Lower the logit of each token the answer holds by this (default 0)")
      ->check(NumberRange(-2, 2));
  app.add_option("--frequency-penalty", sampler->frequency_penalty,
                 "Lower the logit of a token by this per time the answer holds it (default 0)")
      ->check(NumberRange(-2, 2));
  app.add_option("-s,--seed", sampler->seed, "Sampling seed (default 0)")
      ->check(IntegerRange(0, INT64_MAX));
}

void AddInferenceOptions(CLI::App& app, InferenceOptions* options, InferenceFlags* flags) {
  app.add_option("-m,--model", options->model_path,
                 "Hugging Face model directory (config.json + safetensors), ORG/NAME of one in "
                 "the Hugging Face cache, a GGUF file, or a switchyard training checkpoint: a "
                 "step-*.h5 file or its checkpoint.dir (latest step)")
      ->required();
  app.add_option("--device", options->device, "cpu, sim or cuda:N (default cpu)");
  app.add_option(
      "--dtype", flags->dtype,
      "Weight dtype on the device: f32, bf16, f16, or auto: the model's own (config.json's "
      "torch_dtype, a GGUF's float type, f32 for a training checkpoint) (default auto)");
  AddQuantizeOptions(app, &flags->quantize);
  AddThreadsOption(app, &options->threads);
  app.add_option("--policy", options->policy,
                 "Expert policy: where the experts live and how they reach the compute (" +
                     ExpertPolicyList() + "; default resident)");
  app.add_option("--device-slots", options->policy_options.device_slots,
                 "Device expert slots for an offload policy (default: the policy's own)")
      ->check(IntegerRange(0, 1 << 20));
  app.add_option("--device-cache", options->policy_options.device_cache,
                 "Device cache of the slots: none, lru, lfu, lifo, layer-lru, static (default: the "
                 "policy's)");
  app.add_option("--profile", options->policy_options.profile,
                 "Expert popularity profile (JSON) for static placements");
  app.add_option("--predictor", options->policy_options.predictor,
                 "predictive: a file from `switchyard train-predictor` (default: skip-gate)");
  app.add_option("--predictor-stride", options->policy_options.predictor_stride,
                 "predictive: predict 1 or 2 MoE layers ahead (default 1)")
      ->check(IntegerRange(1, 2));
  app.add_flag("--pregate", options->pregate,
               "Load a Hugging Face checkpoint as a pre-gated model (MoE layer m's pre-gate = "
               "layer m+1's gate), as the pregated policy needs");
}

void AddQuantizeOptions(CLI::App& app, QuantizeFlags* flags) {
  app.add_option("--quantize", flags->quantize,
                 "experts: hold the routed experts in --quant-type blocks while attention and the "
                 "rest stay in --dtype (quantized on load, or the GGUF's own blocks); none: "
                 "every weight in --dtype. Default: a GGUF's quantized experts, attention "
                 "projections and LM head stay in their blocks (a Q6_K LM head as q8_0)")
      ->check(CLI::IsMember({"none", "experts"}));
  app.add_option("--quant-type", flags->quant_type,
                 "Block type of --quantize experts: q8_0, q4_0 (quantized on load), or q2_k ... "
                 "q6_k (a GGUF's own blocks of that type only) (default q8_0)")
      ->check(CLI::IsMember({"q8_0", "q4_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}));
}

Result<std::optional<DType>> ParseQuantizeFlags(const QuantizeFlags& flags, DType weight_dtype) {
  if (flags.quantize == "none") return std::optional<DType>(weight_dtype);
  if (flags.quantize != "experts") return std::optional<DType>();
  SY_ASSIGN_OR_RETURN(DType type, ParseDType(flags.quant_type));
  if (!IsQuantized(type)) {
    return InvalidArgumentError("--quant-type " + flags.quant_type +
                                ": expected q8_0, q4_0, q2_k, q3_k, q4_k, q5_k, q6_k");
  }
  return std::optional<DType>(type);
}

namespace {

DType TorchDType(const std::string& name) {
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "float16" || name == "half" || name == "f16") return DType::kF16;
  return DType::kF32;
}

// --dtype auto: the dtype the model's weights come in. A Hugging Face directory's config.json
// names it (torch_dtype, or dtype in newer transformers; a multimodal config's text_config); a
// GGUF stores its float tensors in one type (its token embedding's, when F16 or BF16); a training
// checkpoint holds f32 masters. f32 when nothing says.
Result<DType> ModelWeightDType(const std::string& path) {
  if (IsGgufPath(path)) {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<storage::GgufFile> gguf, storage::GgufFile::Open(path));
    const storage::GgufTensorInfo* embedding = gguf->header().FindTensor("token_embd.weight");
    if (embedding == nullptr) return DType::kF32;
    if (embedding->type == storage::GgmlType::kF16) return DType::kF16;
    if (embedding->type == storage::GgmlType::kBF16) return DType::kBF16;
    return DType::kF32;
  }
  const std::string config = (std::filesystem::path(path) / "config.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config, ec)) return DType::kF32;
  SY_ASSIGN_OR_RETURN(std::string text, ReadFile(config, 64u << 20, "config.json"));
  SY_ASSIGN_OR_RETURN(nlohmann::json root, storage::ParseStrictJson(text, config, "config.json"));
  for (const nlohmann::json* block :
       {&root, root.contains("text_config") && root["text_config"].is_object()
                   ? &root["text_config"]
                   : &root}) {
    for (const char* key : {"torch_dtype", "dtype"}) {
      if (block->contains(key) && (*block)[key].is_string()) {
        return TorchDType((*block)[key].get<std::string>());
      }
    }
  }
  return DType::kF32;
}

}  // namespace

Status ParseInferenceFlags(const InferenceFlags& flags, InferenceOptions* options) {
  // --model ORG/NAME: a model in the Hugging Face cache.
  SY_ASSIGN_OR_RETURN(options->model_path, ResolveModelPath(options->model_path));
  SY_ASSIGN_OR_RETURN(options->weight_dtype, WeightDTypeFlag(flags.dtype, options->model_path));
  SY_ASSIGN_OR_RETURN(options->expert_dtype,
                      ParseQuantizeFlags(flags.quantize, options->weight_dtype));
  options->keep_quantized_matrices = flags.quantize.quantize.empty();
  return Status::Ok();
}

Result<DType> WeightDTypeFlag(const std::string& dtype, const std::string& model_path) {
  if (dtype == "auto") return ModelWeightDType(model_path);
  Result<DType> parsed = ParseDType(dtype);
  if (!parsed.ok() || IsQuantized(*parsed)) {
    return InvalidArgumentError("--dtype " + dtype +
                                ": expected auto, f32, bf16 or f16 (quantized experts: --quantize "
                                "experts --quant-type q8_0)");
  }
  return *parsed;
}

void PrintError(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.ToString().c_str());
}

int ExitCode(const Status& status) {
  if (status.ok()) return 0;
  PrintError(status);
  return 1;
}

}  // namespace sy::launcher
