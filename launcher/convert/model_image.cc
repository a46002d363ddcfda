#include "launcher/convert/model_image.h"

#include <cstring>
#include <filesystem>

#include "launcher/convert/gguf_format.h"
#include "launcher/convert/hf_format.h"
#include "launcher/convert/native_format.h"

namespace sy::convert {
namespace {

void Add(std::vector<ParameterSpec>& out, std::string name, std::vector<int64_t> shape) {
  out.push_back({std::move(name), std::move(shape)});
}

void AddMlp(std::vector<ParameterSpec>& out, const std::string& prefix, int64_t hidden,
            int64_t inter) {
  Add(out, prefix + "w_gate", {inter, hidden});
  Add(out, prefix + "w_up", {inter, hidden});
  Add(out, prefix + "w_down", {hidden, inter});
}

}  // namespace

std::vector<ParameterSpec> ModelParameterSpecs(const ModelConfig& c) {
  std::vector<ParameterSpec> out;
  const int64_t h = c.hidden_size, d = c.dim_per_head();
  const int64_t q_out = c.num_heads * d, kv_out = c.kv_heads() * d;
  Add(out, "embed_tokens", {c.vocab_size, h});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "layers/" + std::to_string(l) + "/";
    Add(out, p + "input_norm", {h});
    const std::pair<const char*, int64_t> projections[] = {
        {"q", q_out}, {"k", kv_out}, {"v", kv_out}};
    for (const auto& [x, n] : projections) {
      Add(out, p + "attn/w" + x, {n, h});
      if (c.attention_bias) Add(out, p + "attn/b" + x, {n});
    }
    Add(out, p + "attn/wo", {h, q_out});
    if (c.attention_out_bias) Add(out, p + "attn/bo", {h});
    if (c.qk_norm) {
      Add(out, p + "attn/q_norm", {c.qk_norm_per_head ? d : q_out});
      Add(out, p + "attn/k_norm", {c.qk_norm_per_head ? d : kv_out});
    }
    Add(out, p + "post_attention_norm", {h});
    const int m = c.MoeIndex(l);
    if (m < 0) {
      AddMlp(out, p + "mlp/", h, c.intermediate_size);
      continue;
    }
    if (c.MoeLayerHasGate(m)) Add(out, p + "moe/gate", {c.num_experts, h});
    if (c.router_scoring == RouterScoring::kSigmoid)
      Add(out, p + "moe/expert_bias", {c.num_experts});
    if (c.MoeLayerHasPregate(m)) Add(out, p + "moe/pregate", {c.num_experts, h});
    if (c.num_shared_experts > 0) {
      AddMlp(out, p + "moe/shared_experts/", h, c.shared_intermediate());
      if (c.shared_expert_gate) Add(out, p + "moe/shared_expert_gate", {1, h});
    }
    for (int e = 0; e < c.num_experts; ++e) {
      AddMlp(out, "experts/layer" + std::to_string(l) + "/expert" + std::to_string(e) + "/", h,
             c.moe_intermediate_size);
    }
  }
  Add(out, "final_norm", {h});
  if (!c.tie_word_embeddings) Add(out, "lm_head", {c.vocab_size, h});
  return out;
}

int64_t ImageTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t ImageTensor::bytes() const { return static_cast<uint64_t>(numel()) * DTypeSize(dtype); }

const ImageTensor* ModelImage::Find(std::string_view name) const {
  for (const ImageTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const std::vector<const ModelFormat*>& ModelFormats() {
  // A new format: one line here.
  static const std::vector<const ModelFormat*> formats = {&NativeFormat(), &HfFormat(),
                                                          &GgufFormat()};
  return formats;
}

Result<const ModelFormat*> FindModelFormat(std::string_view name) {
  std::string names;
  for (const ModelFormat* f : ModelFormats()) {
    if (f->name() == name) return f;
    names += (names.empty() ? "" : ", ") + std::string(f->name());
  }
  return InvalidArgumentError("unknown format '" + std::string(name) + "'; the formats are " +
                              names);
}

Result<const ModelFormat*> DetectModelFormat(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return NotFoundError(path + " does not exist");
  }
  for (const ModelFormat* f : ModelFormats()) {
    if (f->Detect(path)) return f;
  }
  return InvalidArgumentError(
      path +
      " is not a model checkpoint of a known format: a native "
      "checkpoint is a step-*.h5 file (or a directory of them), a "
      "Hugging Face model a directory with config.json and "
      "model.safetensors (or model.safetensors.index.json), a GGUF file starts with "
      "the bytes GGUF");
}

Status RefuseExistingOutput(const std::string& out) {
  std::error_code ec;
  // symlink_status: a link at `out`, even a dangling one, is something there.
  if (std::filesystem::symlink_status(out, ec).type() != std::filesystem::file_type::not_found) {
    return AlreadyExistsError(out + " exists; choose a new --out (convert never overwrites)");
  }
  return Status::Ok();
}

Status ReadTensorAs(const ImageTensor& tensor, DType dtype, std::span<uint8_t> out) {
  const size_t n = static_cast<size_t>(tensor.numel());
  if (out.size() != n * DTypeSize(dtype)) {
    return InternalError("tensor " + tensor.name + ": buffer of " + std::to_string(out.size()) +
                         " bytes for " + std::to_string(n) + " " + std::string(DTypeName(dtype)));
  }
  if (dtype == tensor.dtype) return tensor.read(out);
  auto is_float = [](DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; };
  if (!is_float(dtype) || !is_float(tensor.dtype)) {
    return InvalidArgumentError("tensor " + tensor.stored_name + " is " +
                                std::string(DTypeName(tensor.dtype)) + " and cannot become " +
                                std::string(DTypeName(dtype)));
  }
  std::vector<uint8_t> raw(static_cast<size_t>(tensor.bytes()));
  SY_RETURN_IF_ERROR(tensor.read(raw));
  std::vector<float> f32(n);
  if (tensor.dtype == DType::kF32) {
    if (n > 0) std::memcpy(f32.data(), raw.data(), n * 4);
  } else if (tensor.dtype == DType::kBF16) {
    ConvertBF16ToF32(reinterpret_cast<const BF16*>(raw.data()), f32.data(), n);
  } else {
    ConvertF16ToF32(reinterpret_cast<const F16*>(raw.data()), f32.data(), n);
  }
  if (dtype == DType::kF32) {
    if (n > 0) std::memcpy(out.data(), f32.data(), n * 4);
  } else if (dtype == DType::kBF16) {
    ConvertF32ToBF16(f32.data(), reinterpret_cast<BF16*>(out.data()), n);
  } else {
    ConvertF32ToF16(f32.data(), reinterpret_cast<F16*>(out.data()), n);
  }
  return Status::Ok();
}

}  // namespace sy::convert
