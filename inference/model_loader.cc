#include "inference/model_loader.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "runtime/core/quant_blocks.h"
#include "runtime/model/dense_matrices.h"
#include "runtime/model/pregate_init.h"
#include "storage/formats/safetensors.h"

namespace sy {
namespace {

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t at = s.find(sep, begin);
    parts.push_back(s.substr(begin, at == std::string::npos ? std::string::npos : at - begin));
    if (at == std::string::npos) return parts;
    begin = at + 1;
  }
}

std::string ProjName(const std::string& w) {
  if (w == "w_gate") return "gate_proj";
  if (w == "w_up") return "up_proj";
  if (w == "w_down") return "down_proj";
  return "";
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string ShapeText(std::span<const int64_t> dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

}  // namespace

std::string HfTensorName(HfFamily family, const std::string& name) {
  const bool mixtral = family == HfFamily::kMixtral;
  if (name == "embed_tokens") return "model.embed_tokens.weight";
  if (name == "final_norm") return "model.norm.weight";
  if (name == "lm_head") return "lm_head.weight";
  const std::vector<std::string> p = Split(name, '/');
  if (p.size() >= 3 && p[0] == "layers") {
    const std::string layer = "model.layers." + p[1] + ".";
    if (p.size() == 3 && p[2] == "input_norm") return layer + "input_layernorm.weight";
    if (p.size() == 3 && p[2] == "post_attention_norm") {
      return layer + "post_attention_layernorm.weight";
    }
    if (p.size() == 4 && p[2] == "attn") {
      const std::string& w = p[3];
      if (w.size() == 2 && (w[0] == 'w' || w[0] == 'b') &&
          std::string("qkvo").find(w[1]) != std::string::npos) {
        return layer + "self_attn." + w[1] + "_proj." + (w[0] == 'w' ? "weight" : "bias");
      }
      if (w == "q_norm" || w == "k_norm") return layer + "self_attn." + w + ".weight";
      return "";
    }
    if (p.size() == 4 && p[2] == "mlp") {
      const std::string proj = ProjName(p[3]);
      return proj.empty() ? "" : layer + "mlp." + proj + ".weight";
    }
    if (p.size() == 4 && p[2] == "moe" && p[3] == "gate") {
      return layer + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
    }
    if (p.size() == 4 && p[2] == "moe" && p[3] == "expert_bias") {
      return family == HfFamily::kGlm4Moe ? layer + "mlp.gate.e_score_correction_bias" : "";
    }
    if (p.size() == 4 && p[2] == "moe" && p[3] == "shared_expert_gate") {
      return family == HfFamily::kQwen2Moe ? layer + "mlp.shared_expert_gate.weight" : "";
    }
    if (p.size() == 5 && p[2] == "moe" && p[3] == "shared_experts") {
      const std::string proj = ProjName(p[4]);
      if (proj.empty()) return "";
      if (family == HfFamily::kQwen2Moe) return layer + "mlp.shared_expert." + proj + ".weight";
      if (family == HfFamily::kDeepseek || family == HfFamily::kGlm4Moe) {
        return layer + "mlp.shared_experts." + proj + ".weight";
      }
      return "";
    }
    return "";
  }
  // experts/layer{L}/expert{E}/{w_gate,w_up,w_down}
  if (p.size() == 4 && p[0] == "experts" && p[1].rfind("layer", 0) == 0 &&
      p[2].rfind("expert", 0) == 0) {
    const std::string layer = "model.layers." + p[1].substr(5) + ".";
    const std::string expert = p[2].substr(6);
    if (mixtral) {
      // Mixtral: w1 = gate, w3 = up, w2 = down.
      const std::string w = p[3] == "w_gate"   ? "w1"
                            : p[3] == "w_up"   ? "w3"
                            : p[3] == "w_down" ? "w2"
                                               : "";
      return w.empty() ? "" : layer + "block_sparse_moe.experts." + expert + "." + w + ".weight";
    }
    const std::string proj = ProjName(p[3]);
    return proj.empty() ? "" : layer + "mlp.experts." + expert + "." + proj + ".weight";
  }
  return "";
}

void ResolveConfigAgainstCheckpoint(const storage::SafetensorsCheckpoint& ckpt, HfModelConfig& hf) {
  if (hf.attention_bias_from_checkpoint &&
      !ckpt.Contains(HfTensorName(hf.family, "layers/0/attn/bq"))) {
    hf.config.attention_bias = false;  // a Qwen2-MoE exported without q/k/v biases
  }
}

Status UploadParameter(Backend& backend, Parameter& param, std::span<const float> values,
                       std::vector<uint16_t>& scratch) {
  const Tensor& value = param.value;
  const size_t n = static_cast<size_t>(value.numel());
  SY_CHECK_EQ(values.size(), n) << param.name;
  Tensor host;
  switch (value.dtype()) {
    case DType::kF32:
      host = Tensor::Wrap(const_cast<float*>(values.data()), DType::kF32, value.shape());
      break;
    case DType::kBF16:
      scratch.resize(n);
      ConvertF32ToBF16(values.data(), reinterpret_cast<BF16*>(scratch.data()), n);
      host = Tensor::Wrap(scratch.data(), DType::kBF16, value.shape());
      break;
    case DType::kF16:
      scratch.resize(n);
      ConvertF32ToF16(values.data(), reinterpret_cast<F16*>(scratch.data()), n);
      host = Tensor::Wrap(scratch.data(), DType::kF16, value.shape());
      break;
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kI8:
    case DType::kF64:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      return InvalidArgumentError("parameter " + param.name + " has the dtype " +
                                  std::string(DTypeName(value.dtype())) +
                                  ", which f32 values do not upload to (UploadBlocks)");
  }
  backend.CopyAsync(host, value, backend.compute_stream());
  // The staging buffers are reused for the next tensor.
  backend.SynchronizeStream(backend.compute_stream());
  return Status::Ok();
}

Status UploadBlocks(Backend& backend, Parameter& param, std::span<const uint8_t> blocks) {
  const Tensor& value = param.value;
  SY_CHECK_EQ(blocks.size(), value.nbytes()) << param.name;
  const Tensor host =
      Tensor::Wrap(const_cast<uint8_t*>(blocks.data()), value.dtype(), value.shape());
  backend.CopyAsync(host, value, backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  return Status::Ok();
}

std::optional<DType> HfTensorSource::StoredQuantizedDType(const std::string&) const {
  return std::nullopt;
}

bool HfTensorSource::StoredQuantized(const std::string&) const { return false; }

Status HfTensorSource::ReadBlocks(const std::string& name, std::span<uint8_t>) const {
  return UnimplementedError(where() + ": tensor \"" + name + "\" is not stored in blocks");
}

namespace {

// A safetensors checkpoint as an HfTensorSource.
class SafetensorsSource : public HfTensorSource {
 public:
  explicit SafetensorsSource(const storage::SafetensorsCheckpoint& ckpt) : ckpt_(ckpt) {}
  const std::string& where() const override { return ckpt_.dir(); }
  std::string_view config_name() const override { return "config.json"; }
  std::vector<std::string> TensorNames() const override { return ckpt_.TensorNames(); }
  bool Contains(const std::string& name) const override { return ckpt_.Contains(name); }
  Result<std::vector<int64_t>> Shape(const std::string& name) const override {
    SY_ASSIGN_OR_RETURN(storage::TensorBytes t, ckpt_.Get(name));
    return t.info->shape;
  }
  Status ReadF32(const std::string& name, std::span<float> out) const override {
    SY_ASSIGN_OR_RETURN(storage::TensorBytes t, ckpt_.Get(name));
    return storage::ConvertToF32(t, out);
  }

 private:
  const storage::SafetensorsCheckpoint& ckpt_;
};

// The Hugging Face name of our parameter `name`, checked to exist with shape `want_shape`; it goes
// into `used`.
Result<std::string> CheckedTensorName(const HfTensorSource& source, HfFamily family,
                                      const std::string& name, const Shape& want_shape,
                                      std::set<std::string>& used) {
  const std::string& dir = source.where();
  const std::string config(source.config_name());
  const std::string hf_name = HfTensorName(family, name);
  if (hf_name.empty()) {
    return InternalError("no Hugging Face name for parameter " + name + " of " +
                         std::string(HfFamilyModelType(family)));
  }
  Result<std::vector<int64_t>> have = source.Shape(hf_name);
  if (!have.ok()) {
    return NotFoundError(dir + ": tensor \"" + hf_name + "\" is missing (needed for " + name +
                         " of this " + std::string(HfFamilyModelType(family)) +
                         " config); the checkpoint does not match " + config);
  }
  used.insert(hf_name);
  const std::span<const int64_t> want = want_shape.dims();
  if (!std::equal(want.begin(), want.end(), have->begin(), have->end())) {
    return InvalidArgumentError(dir + ": tensor \"" + hf_name + "\" has shape " + ShapeText(*have) +
                                ", but " + config + " implies " + ShapeText(want) +
                                "; the checkpoint does not match " + config);
  }
  return hf_name;
}

// Our parameter `name` of shape `want` from the checkpoint, converted to f32 into `f32`.
Status ReadTensor(const HfTensorSource& source, HfFamily family, const std::string& name,
                  const Shape& want_shape, std::set<std::string>& used, std::vector<float>& f32) {
  SY_ASSIGN_OR_RETURN(std::string hf_name,
                      CheckedTensorName(source, family, name, want_shape, used));
  f32.resize(static_cast<size_t>(want_shape.numel()));
  return source.ReadF32(hf_name, f32);
}

// Our parameter `name` as `dtype` blocks (quantized) into `blocks`: the file's own blocks when it
// stores exactly that type, else its values read as f32 (through `f32`) and quantized.
Status ReadQuantizedTensor(const HfTensorSource& source, HfFamily family, const std::string& name,
                           const Shape& want_shape, DType dtype, std::set<std::string>& used,
                           std::vector<float>& f32, std::vector<uint8_t>& blocks) {
  SY_ASSIGN_OR_RETURN(std::string hf_name,
                      CheckedTensorName(source, family, name, want_shape, used));
  blocks.resize(DTypeBytes(dtype, want_shape.numel()));
  const std::optional<DType> stored = source.StoredQuantizedDType(hf_name);
  if (stored == dtype) return source.ReadBlocks(hf_name, blocks);
  if (dtype != DType::kQ8_0 && dtype != DType::kQ4_0) {
    return InvalidArgumentError(
        source.where() + ": tensor \"" + hf_name + "\" is stored as " +
        (stored ? std::string(DTypeName(*stored)) : std::string("floats")) + ", and " +
        std::string(DTypeName(dtype)) +
        " has no quantizer here; load it as q8_0 or q4_0, or keep it unquantized");
  }
  f32.resize(static_cast<size_t>(want_shape.numel()));
  SY_RETURN_IF_ERROR(source.ReadF32(hf_name, f32));
  QuantizeBlocks(dtype, f32.data(), blocks.data(), want_shape.numel());
  return Status::Ok();
}

const char* ExpertWeightName(offload::ExpertChunk c) {
  switch (c) {
    case offload::ExpertChunk::kGate:
      return "w_gate";
    case offload::ExpertChunk::kUp:
      return "w_up";
    case offload::ExpertChunk::kDown:
      return "w_down";
  }
  return "";
}

// Every routed expert of the checkpoint, converted to the layout's dtype straight into `host`'s
// pinned memory (host-accessible on every backend: AllocateHost).
Status LoadHostExperts(const HfTensorSource& ckpt, HfFamily family, const ModelConfig& config,
                       offload::HostExperts& host, std::set<std::string>& used,
                       std::vector<float>& f32, const std::function<void(int64_t)>& loaded) {
  const offload::ExpertLayout& layout = host.layout();
  std::vector<uint8_t> blocks;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const int m = config.MoeIndex(layer);
    if (m < 0) continue;
    for (int e = 0; e < layout.num_experts; ++e) {
      const offload::ExpertKey key{static_cast<uint32_t>(m), static_cast<uint32_t>(e)};
      const std::string base =
          "experts/layer" + std::to_string(layer) + "/expert" + std::to_string(e) + "/";
      for (const offload::ExpertChunk c : offload::kExpertChunks) {
        const Tensor dst = host.chunk(key, c);
        if (IsQuantized(dst.dtype())) {
          SY_RETURN_IF_ERROR(ReadQuantizedTensor(ckpt, family, base + ExpertWeightName(c),
                                                 dst.shape(), dst.dtype(), used, f32, blocks));
          std::memcpy(dst.data(), blocks.data(), blocks.size());
          loaded(dst.numel());
          continue;
        }
        SY_RETURN_IF_ERROR(
            ReadTensor(ckpt, family, base + ExpertWeightName(c), dst.shape(), used, f32));
        const size_t n = f32.size();
        loaded(static_cast<int64_t>(n));
        switch (dst.dtype()) {
          case DType::kF32:
            std::memcpy(dst.data(), f32.data(), n * sizeof(float));
            break;
          case DType::kBF16:
            ConvertF32ToBF16(f32.data(), static_cast<BF16*>(dst.data()), n);
            break;
          case DType::kF16:
            ConvertF32ToF16(f32.data(), static_cast<F16*>(dst.data()), n);
            break;
          case DType::kI32:
          case DType::kI64:
          case DType::kU8:
          case DType::kI8:
          case DType::kF64:
          case DType::kQ8_0:
          case DType::kQ4_0:
          case DType::kQ4_K:
          case DType::kQ5_K:
          case DType::kQ6_K:
          case DType::kQ2_K:
          case DType::kQ3_K:
            return InvalidArgumentError("host experts need a float weight dtype");
        }
      }
    }
  }
  return Status::Ok();
}

// What config.json claims against what the files hold, before the model is allocated: a config
// of 10^9 layers over a few tensors fails here, not after allocating them. Every decoder layer
// of every family has an input norm; the layers are checked in order up to the first missing
// one, so the check is bounded by the checkpoint, not by the config. Then the parameter count the
// config implies must not be more than twice the values the files hold (a hidden size far past
// the weights').
Status CheckCheckpointCoversConfig(const HfTensorSource& ckpt, HfFamily family,
                                   const ModelConfig& config) {
  const std::string cfg(ckpt.config_name());
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const std::string name =
        HfTensorName(family, "layers/" + std::to_string(layer) + "/input_norm");
    if (!ckpt.Contains(name)) {
      return NotFoundError(ckpt.where() + ": " + cfg + " says num_hidden_layers " +
                           std::to_string(config.num_layers) + ", but tensor \"" + name +
                           "\" is missing (the checkpoint holds " + std::to_string(layer) +
                           (layer == 1 ? " layer" : " layers") +
                           "); the checkpoint does not match " + cfg);
    }
  }
  int64_t held = 0;
  for (const std::string& name : ckpt.TensorNames()) {
    SY_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ckpt.Shape(name));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    held += n;
  }
  // A small shortfall (a missing tensor) is named precisely by the load itself, whose memory it
  // bounds; a large one would allocate far past the files first.
  const int64_t needed = config.NumParameters();
  if (needed / 2 > held) {
    return InvalidArgumentError(ckpt.where() + ": " + cfg + " implies " + std::to_string(needed) +
                                " parameters, more than twice the " + std::to_string(held) +
                                " values the checkpoint holds; the checkpoint does not match " +
                                cfg);
  }
  return Status::Ok();
}

// The routed experts' dtypes: one for the model (ModelOptions::expert_weight_dtype) and those of
// the layers that differ from it (ModelOptions::expert_layer_dtypes).
struct ExpertDTypes {
  DType common;
  std::map<int, ExpertMatrixDTypes> layers;
};

// LoadOptions::expert_dtype; else, when the backend takes quantized weights and every routed
// expert matrix is stored in blocks of a type with kernels here whose blocks the rows fill, those
// types as they are: one for all, or (not for experts on the host, whose layout holds one type)
// the most common one with the layers that differ (llama-quantize's Q4_K_M and Q5_K_M files keep
// some layers' down projections in Q6_K); else, when the file stores them in blocks, q8_0 where
// the rows are whole blocks of 32; else weight_dtype. Checks expert 0 of each MoE layer: a GGUF
// holds each layer's experts in one tensor per matrix, so one type.
ExpertDTypes ChooseExpertDTypes(const Backend& backend, const HfTensorSource& source,
                                HfFamily family, const ModelConfig& config,
                                const LoadOptions& options) {
  if (options.expert_dtype) return {*options.expert_dtype, {}};
  if (!backend.caps().quantized_weights) return {options.weight_dtype, {}};
  const auto whole_blocks = [&](DType t) {
    return config.hidden_size % DTypeBlockSize(t) == 0 &&
           config.moe_intermediate_size % DTypeBlockSize(t) == 0;
  };
  std::map<int, ExpertMatrixDTypes> stored_by_layer;
  std::map<DType, int> count;
  bool all_native = true, any_blocks = false;
  for (int layer = 0; layer < config.num_layers; ++layer) {
    if (config.MoeIndex(layer) < 0) continue;
    DType types[3] = {};
    for (int c = 0; c < 3; ++c) {
      static constexpr const char* kMatrices[] = {"w_gate", "w_up", "w_down"};
      const std::string name = HfTensorName(
          family, "experts/layer" + std::to_string(layer) + "/expert0/" + kMatrices[c]);
      const std::optional<DType> stored = source.StoredQuantizedDType(name);
      any_blocks = any_blocks || source.StoredQuantized(name);
      if (!stored || !whole_blocks(*stored)) {
        all_native = false;
        continue;
      }
      types[c] = *stored;
      ++count[*stored];
    }
    stored_by_layer[layer] = ExpertMatrixDTypes{types[0], types[1], types[2]};
  }
  if (all_native && count.size() == 1) return {count.begin()->first, {}};
  if (all_native && !count.empty() && !options.experts_on_host) {
    ExpertDTypes out{count.begin()->first, {}};
    for (const auto& [t, n] : count) {
      if (n > count[out.common]) out.common = t;
    }
    for (const auto& [layer, types] : stored_by_layer) {
      if (!(types == ExpertMatrixDTypes::All(out.common))) out.layers[layer] = types;
    }
    return out;
  }
  if (any_blocks && whole_blocks(DType::kQ8_0)) return {DType::kQ8_0, {}};
  return {options.weight_dtype, {}};
}

// ModelOptions::matrix_dtypes for LoadOptions::keep_quantized_matrices: each dense matrix the
// file stores in blocks, in its own type where the runtime has kernels for it and its rows are
// whole blocks, else in q8_0 where they are whole blocks of 32.
std::map<std::string, DType> HeldMatrixDTypes(const HfTensorSource& source, HfFamily family,
                                              const ModelConfig& config) {
  std::map<std::string, DType> held;
  for (const DenseMatrix& m : DenseMatrices(config)) {
    const std::string hf_name = HfTensorName(family, m.name);
    if (!source.StoredQuantized(hf_name)) continue;
    const std::optional<DType> stored = source.StoredQuantizedDType(hf_name);
    if (stored && m.in_features % DTypeBlockSize(*stored) == 0) {
      held[m.name] = *stored;
    } else if (m.in_features % DTypeBlockSize(DType::kQ8_0) == 0) {
      held[m.name] = DType::kQ8_0;
    }
  }
  return held;
}

}  // namespace

Result<LoadedModel> LoadHfModel(Backend& backend, const std::string& dir,
                                const LoadOptions& options) {
  SY_ASSIGN_OR_RETURN(HfModelConfig hf, LoadHfConfig(dir));
  SY_ASSIGN_OR_RETURN(auto ckpt, storage::SafetensorsCheckpoint::Open(dir));
  ResolveConfigAgainstCheckpoint(*ckpt, hf);
  return LoadModelFromSource(backend, std::move(hf), SafetensorsSource(*ckpt), options);
}

Result<LoadedModel> LoadModelFromSource(Backend& backend, HfModelConfig hf,
                                        const HfTensorSource& source, const LoadOptions& options) {
  LoadedModel loaded;
  loaded.hf = std::move(hf);
  const HfFamily family = loaded.hf.family;
  const std::string& dir = source.where();
  if (options.pregate) {
    if (loaded.hf.config.NumMoeLayers() < 2) {
      return InvalidArgumentError(dir + ": a pre-gated load needs at least two MoE layers; this " +
                                  std::string(HfFamilyModelType(family)) + " config has " +
                                  std::to_string(loaded.hf.config.NumMoeLayers()));
    }
    loaded.hf.config.pregate = true;
  }
  const HfTensorSource* ckpt = &source;
  SY_RETURN_IF_ERROR(CheckCheckpointCoversConfig(*ckpt, family, loaded.hf.config));
  ModelOptions model_options;
  model_options.with_grad = false;
  model_options.weight_dtype = options.weight_dtype;
  model_options.routed_experts = !options.experts_on_host;
  ExpertDTypes expert_dtypes =
      ChooseExpertDTypes(backend, *ckpt, family, loaded.hf.config, options);
  model_options.expert_weight_dtype = expert_dtypes.common;
  model_options.expert_layer_dtypes = std::move(expert_dtypes.layers);
  if (options.keep_quantized_matrices && backend.caps().quantized_weights) {
    model_options.matrix_dtypes = HeldMatrixDTypes(*ckpt, family, loaded.hf.config);
  }
  SY_ASSIGN_OR_RETURN(loaded.model, MoeModel::Create(backend, loaded.hf.config, model_options));

  std::set<std::string> used;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<uint8_t> blocks;
  // Progress: the values of the model's parameters, and of the host experts when loaded there.
  int64_t total = 0, done = 0;
  for (const Parameter& param : loaded.model->parameters()) total += param.value.numel();
  const bool host_experts = options.experts_on_host && loaded.hf.config.NumMoeLayers() > 0;
  if (host_experts) {
    total += loaded.hf.config.NumMoeLayers() * int64_t{loaded.hf.config.num_experts} * 3 *
             loaded.hf.config.hidden_size * loaded.hf.config.moe_intermediate_size;
  }
  auto advance = [&](int64_t values) {
    done += values;
    if (options.progress) options.progress(done, std::max(total, done));
  };
  if (host_experts) {
    SY_ASSIGN_OR_RETURN(offload::ExpertLayout layout, offload::ExpertLayoutOf(*loaded.model));
    SY_ASSIGN_OR_RETURN(std::unique_ptr<offload::HostExperts> host,
                        offload::HostExperts::Create(backend, layout));
    SY_RETURN_IF_ERROR(LoadHostExperts(*ckpt, family, loaded.hf.config, *host, used, f32, advance));
    loaded.host_experts = std::move(host);
  }
  for (Parameter& param : loaded.model->parameters()) {
    // A pre-gate reads the next MoE layer's gate; every other name is its own source.
    const std::string from = PregateSourceName(loaded.hf.config, param.name);
    if (IsQuantized(param.value.dtype())) {
      SY_RETURN_IF_ERROR(ReadQuantizedTensor(*ckpt, family, from, param.value.shape(),
                                             param.value.dtype(), used, f32, blocks));
      SY_RETURN_IF_ERROR(UploadBlocks(backend, param, blocks));
    } else {
      SY_RETURN_IF_ERROR(ReadTensor(*ckpt, family, from, param.value.shape(), used, f32));
      SY_RETURN_IF_ERROR(UploadParameter(backend, param, f32, half));
    }
    advance(param.value.numel());
  }
  std::vector<std::string> unexpected;
  for (const std::string& name : ckpt->TensorNames()) {
    if (used.count(name)) continue;
    if (EndsWith(name, "rotary_emb.inv_freq")) continue;  // a recomputed buffer, not a weight
    if (name == "lm_head.weight" && loaded.hf.config.tie_word_embeddings) continue;
    if (InUnusedTrailingLayer(loaded.hf, name)) continue;
    unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 5; ++i) {
      list += (i ? ", \"" : "\"") + unexpected[i] + "\"";
    }
    if (unexpected.size() > 5) list += ", ... (" + std::to_string(unexpected.size()) + " in all)";
    return InvalidArgumentError(dir + ": unexpected tensor " + list + " for a " +
                                std::string(HfFamilyModelType(family)) + " model with this " +
                                std::string(source.config_name()) +
                                "; the checkpoint has weights "
                                "Switchyard would ignore (a different architecture or config)");
  }
  if (options.pregate) {
    // Pre-gated MoE fine-tunes its pre-gates; a conventional checkpoint has none to load.
    spdlog::warn(
        "pregate: {} has no trained pre-gates, so each MoE layer's pre-gate is the next MoE "
        "layer's gate applied to this layer's input; the routing, and the answers, are those of "
        "an altered model (compare them with the checkpoint's: switchyard perplexity --reference)",
        dir);
  }
  return loaded;
}

}  // namespace sy
