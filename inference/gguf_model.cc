#include "inference/gguf_model.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "runtime/core/dtype.h"
#include "runtime/core/regular_file.h"
#include "storage/formats/ggml_quants.h"
#include "storage/formats/gguf_writer.h"
#include "storage/formats/safetensors.h"

namespace sy {
namespace {

// llama.cpp loads output.weight as required (not TENSOR_NOT_REQUIRED) for these archs.
bool NeedsOutputTensor(HfFamily family) { return family == HfFamily::kOlmoe; }

using storage::GgmlType;
using storage::GgufHeader;
using storage::GgufKeyValue;
using storage::GgufTensorInfo;
using storage::GgufValue;

// ---- names ----

struct NamePair {
  std::string hf;    // inside model.layers.L.
  std::string gguf;  // inside blk.L.
};

// The per-layer tensors that are not routed experts, for `family`.
std::vector<NamePair> LayerNames(HfFamily family) {
  // llama.cpp's glm4moe names the norm before the FFN attn_post_norm ("post_attention_norm").
  std::vector<NamePair> t = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight",
       family == HfFamily::kGlm4Moe ? "post_attention_norm.weight" : "ffn_norm.weight"},
  };
  for (const char* x : {"q", "k", "v"}) {
    for (const char* kind : {"weight", "bias"}) {
      t.push_back(
          {std::string("self_attn.") + x + "_proj." + kind, std::string("attn_") + x + "." + kind});
    }
  }
  t.push_back({"self_attn.o_proj.weight", "attn_output.weight"});
  t.push_back({"self_attn.o_proj.bias", "attn_output.bias"});
  t.push_back({"self_attn.q_norm.weight", "attn_q_norm.weight"});
  t.push_back({"self_attn.k_norm.weight", "attn_k_norm.weight"});
  for (const char* p : {"gate", "up", "down"}) {
    t.push_back({std::string("mlp.") + p + "_proj.weight", std::string("ffn_") + p + ".weight"});
  }
  t.push_back({family == HfFamily::kMixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight",
               "ffn_gate_inp.weight"});
  const char* shared = family == HfFamily::kQwen2Moe ? "mlp.shared_expert."
                       : family == HfFamily::kDeepseek || family == HfFamily::kGlm4Moe
                           ? "mlp.shared_experts."
                           : nullptr;
  if (family == HfFamily::kGlm4Moe) {
    t.push_back({"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"});
  }
  if (shared != nullptr) {
    for (const char* p : {"gate", "up", "down"}) {
      t.push_back(
          {std::string(shared) + p + "_proj.weight", std::string("ffn_") + p + "_shexp.weight"});
    }
  }
  if (family == HfFamily::kQwen2Moe) {
    t.push_back({"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"});
  }
  return t;
}

// Routed experts: HF "PREFIX.E.<proj>.weight" <-> GGUF stack "<stack>.weight".
struct ExpertName {
  std::string proj;   // "gate_proj" / Mixtral "w1"
  std::string stack;  // "ffn_gate_exps"
};

std::string ExpertPrefix(HfFamily family) {
  return family == HfFamily::kMixtral ? "block_sparse_moe.experts." : "mlp.experts.";
}

std::vector<ExpertName> ExpertNames(HfFamily family) {
  if (family == HfFamily::kMixtral) {
    return {{"w1", "ffn_gate_exps"}, {"w3", "ffn_up_exps"}, {"w2", "ffn_down_exps"}};
  }
  return {
      {"gate_proj", "ffn_gate_exps"}, {"up_proj", "ffn_up_exps"}, {"down_proj", "ffn_down_exps"}};
}

const std::pair<const char*, const char*> kTopNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};

// Heads over which the rows of HF tensor `suffix` (inside a layer) are interleaved in GGUF, or 0.
int PermuteHeads(HfFamily family, const ModelConfig& c, const std::string& suffix) {
  if (!GgufPermutesQK(family)) return 0;
  if (suffix == "self_attn.q_proj.weight" || suffix == "self_attn.q_proj.bias") {
    return c.num_heads;
  }
  if (suffix == "self_attn.k_proj.weight" || suffix == "self_attn.k_proj.bias") {
    return c.kv_heads();
  }
  return 0;
}

// Moves the rows of `data` (rows of `row_bytes` bytes, `heads` heads of equal size) between the
// HF order (halves) and llama.cpp's (interleaved). to_gguf: HF row h*d + j*d/2 + i goes to GGUF
// row h*d + 2i + j; otherwise the inverse.
Status PermuteRows(std::span<uint8_t> data, size_t row_bytes, int heads, bool to_gguf,
                   const std::string& what) {
  const size_t rows = row_bytes == 0 ? 0 : data.size() / row_bytes;
  if (heads <= 0 || rows % (2 * static_cast<size_t>(heads)) != 0) {
    return InvalidArgumentError(what + ": " + std::to_string(rows) + " rows do not split into " +
                                std::to_string(heads) +
                                " heads of an even size, which the RoPE permutation needs");
  }
  const size_t d = rows / static_cast<size_t>(heads);
  std::vector<uint8_t> src(data.begin(), data.end());
  for (size_t h = 0; h < static_cast<size_t>(heads); ++h) {
    for (size_t j = 0; j < 2; ++j) {
      for (size_t i = 0; i < d / 2; ++i) {
        const size_t hf_row = h * d + j * (d / 2) + i;
        const size_t gguf_row = h * d + 2 * i + j;
        const size_t to = to_gguf ? gguf_row : hf_row;
        const size_t from = to_gguf ? hf_row : gguf_row;
        std::memcpy(data.data() + to * row_bytes, src.data() + from * row_bytes, row_bytes);
      }
    }
  }
  return Status::Ok();
}

// Splits "blk.L.rest" into L and rest; false for any other name.
bool SplitBlockName(const std::string& name, int* layer, std::string* rest) {
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6) return false;
  int l = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    l = l * 10 + (name[i] - '0');
  }
  *layer = l;
  *rest = name.substr(dot + 1);
  return true;
}

}  // namespace

// ---- GgufCheckpoint ----

Result<std::unique_ptr<GgufCheckpoint>> GgufCheckpoint::Open(const std::string& path) {
  std::unique_ptr<GgufCheckpoint> ck(new GgufCheckpoint());
  SY_ASSIGN_OR_RETURN(ck->file_, storage::GgufFile::Open(path));
  const GgufHeader& h = ck->file_->header();
  SY_ASSIGN_OR_RETURN(ck->config_, ParseGgufModelConfig(h, path));
  const HfFamily family = ck->config_.family;
  const ModelConfig& c = ck->config_.config;
  std::map<std::string, std::string> layer_names;  // gguf suffix -> hf suffix
  for (const NamePair& p : LayerNames(family)) layer_names[p.gguf] = p.hf;
  std::map<std::string, std::string> stacks;  // "ffn_gate_exps.weight" -> HF proj
  for (const ExpertName& e : ExpertNames(family)) stacks[e.stack + ".weight"] = e.proj;
  auto unknown = [&](const GgufTensorInfo& t, const std::string& why) {
    return InvalidArgumentError(path + ": tensor \"" + t.name + "\" " + why + " for a " +
                                std::string(GgufArchitecture(family)) +
                                " model; the file has weights Switchyard would ignore (a "
                                "different architecture or a newer llama.cpp)");
  };
  for (const GgufTensorInfo& t : h.tensors) {
    // A tied model's copy of the embedding (kGgufTiedOutputKey): no lm_head.weight of its own.
    if (c.tie_word_embeddings && t.name == "output.weight") continue;
    const std::vector<int64_t> shape = t.shape();
    bool found = false;
    for (const auto& [hf_name, gguf_name] : kTopNames) {
      if (t.name == gguf_name) {
        ck->entries_.push_back({hf_name, Entry{&t, -1, 0, shape}});
        found = true;
      }
    }
    if (found) continue;
    int layer = 0;
    std::string rest;
    if (!SplitBlockName(t.name, &layer, &rest))
      return unknown(t, "has no Hugging Face counterpart");
    if (layer >= c.num_layers &&
        layer < int64_t{c.num_layers} + ck->config_.unused_trailing_layers) {
      continue;  // a multi-token-prediction block (nextn_predict_layers): not in the forward
    }
    if (layer >= c.num_layers) return unknown(t, "has no Hugging Face counterpart");
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    if (auto it = layer_names.find(rest); it != layer_names.end()) {
      ck->entries_.push_back(
          {prefix + it->second, Entry{&t, -1, PermuteHeads(family, c, it->second), shape}});
      continue;
    }
    auto it = stacks.find(rest);
    if (it == stacks.end()) return unknown(t, "has no Hugging Face counterpart");
    if (t.ne.size() != 3 || t.ne[2] != c.num_experts) {
      return unknown(t, "is not a 3-D stack of " + std::to_string(c.num_experts) + " experts");
    }
    for (int e = 0; e < c.num_experts; ++e) {
      ck->entries_.push_back(
          {prefix + ExpertPrefix(family) + std::to_string(e) + "." + it->second + ".weight",
           Entry{&t, e, 0, {t.ne[1], t.ne[0]}}});
    }
  }
  std::sort(ck->entries_.begin(), ck->entries_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return ck;
}

std::vector<std::string> GgufCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, e] : entries_) names.push_back(name);
  return names;
}

Result<const GgufCheckpoint::Entry*> GgufCheckpoint::Find(const std::string& name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const auto& a, const std::string& n) { return a.first < n; });
  if (it == entries_.end() || it->first != name) {
    return NotFoundError(where() + ": no tensor for \"" + name + "\"");
  }
  return &it->second;
}

bool GgufCheckpoint::Contains(const std::string& name) const { return Find(name).ok(); }

Result<std::vector<int64_t>> GgufCheckpoint::Shape(const std::string& name) const {
  SY_ASSIGN_OR_RETURN(const Entry* e, Find(name));
  return e->shape;
}

Result<GgmlType> GgufCheckpoint::Type(const std::string& name) const {
  SY_ASSIGN_OR_RETURN(const Entry* e, Find(name));
  return e->tensor->type;
}

std::span<const uint8_t> GgufCheckpoint::Bytes(const Entry& e) const {
  std::span<const uint8_t> all = file_->Data(*e.tensor);
  if (e.expert < 0) return all;
  const size_t slab = all.size() / static_cast<size_t>(e.tensor->ne[2]);
  return all.subspan(static_cast<size_t>(e.expert) * slab, slab);
}

Status GgufCheckpoint::ReadF32(const std::string& name, std::span<float> out) const {
  SY_ASSIGN_OR_RETURN(const Entry* e, Find(name));
  const std::string what = where() + ": tensor \"" + e->tensor->name + "\"";
  if (Status s = storage::DequantizeToF32(e->tensor->type, Bytes(*e), out); !s.ok()) {
    return s.WithContext(what);
  }
  if (e->permute_heads > 0) {
    const size_t row = e->shape.size() == 2 ? static_cast<size_t>(e->shape[1]) : 1;
    std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(out.data()), out.size() * sizeof(float));
    return PermuteRows(bytes, row * sizeof(float), e->permute_heads, /*to_gguf=*/false, what);
  }
  return Status::Ok();
}

Result<std::vector<uint8_t>> GgufCheckpoint::ReadRaw(const std::string& name) const {
  SY_ASSIGN_OR_RETURN(const Entry* e, Find(name));
  const std::string what = where() + ": tensor \"" + e->tensor->name + "\"";
  const GgmlType type = e->tensor->type;
  if (!storage::GgmlTypeToDType(type)) {
    return InvalidArgumentError(what + " is " + std::string(storage::GgmlTypeName(type)) +
                                ", which has no runtime dtype; read it as f32");
  }
  const std::span<const uint8_t> src = Bytes(*e);
  std::vector<uint8_t> out(src.begin(), src.end());
  if (e->permute_heads > 0) {
    const size_t row = e->shape.size() == 2 ? static_cast<size_t>(e->shape[1]) : 1;
    const auto row_bytes =
        static_cast<size_t>(row / storage::GgmlBlockSize(type) * storage::GgmlTypeSize(type));
    SY_RETURN_IF_ERROR(PermuteRows(out, row_bytes, e->permute_heads, /*to_gguf=*/false, what));
  }
  return out;
}

std::optional<DType> GgufCheckpoint::StoredQuantizedDType(const std::string& name) const {
  Result<const Entry*> e = Find(name);
  if (!e.ok()) return std::nullopt;
  const std::optional<DType> dtype = storage::GgmlTypeToDType((*e)->tensor->type);
  if (!dtype || !IsQuantized(*dtype)) return std::nullopt;
  return dtype;
}

bool GgufCheckpoint::StoredQuantized(const std::string& name) const {
  Result<const Entry*> e = Find(name);
  return e.ok() && storage::GgmlBlockSize((*e)->tensor->type) > 1;
}

Status GgufCheckpoint::ReadBlocks(const std::string& name, std::span<uint8_t> out) const {
  SY_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, ReadRaw(name));
  if (raw.size() != out.size()) {
    return InvalidArgumentError(where() + ": tensor \"" + name + "\" holds " +
                                std::to_string(raw.size()) + " bytes where " +
                                std::to_string(out.size()) + " were expected");
  }
  std::memcpy(out.data(), raw.data(), raw.size());
  return Status::Ok();
}

// ---- export ----

namespace {

struct PlannedTensor {
  std::string gguf_name;
  std::vector<const HfTensorView*> sources;  // one, or one per expert (stacked)
  int permute_heads = 0;
  bool keep_f32 = false;  // a router or shared-expert gate: never quantized
};

// Values of `view` as f32 (F32, F16, BF16 sources).
Status ViewToF32(const HfTensorView& view, std::span<float> out) {
  return storage::DequantizeToF32(view.type, view.bytes, out);
}

}  // namespace

Status WriteGgufFromHf(const HfModelConfig& hf, std::span<const HfTensorView> tensors,
                       const std::string& path, const GgufExportOptions& options) {
  const HfFamily family = hf.family;
  const ModelConfig& c = hf.config;
  if (!GgufSupportsFamily(family)) {
    return UnimplementedError(path + ": writing a " + std::string(HfFamilyDisplayName(family)) +
                              " model as GGUF (" + std::string(GgufArchitecture(family)) +
                              ") is not implemented yet; convert it to a Hugging Face directory "
                              "instead");
  }
  std::map<std::string, const HfTensorView*> by_name;
  for (const HfTensorView& t : tensors) {
    if (t.type != GgmlType::kF32 && t.type != GgmlType::kF16 && t.type != GgmlType::kBF16) {
      return InvalidArgumentError(path + ": tensor \"" + t.name +
                                  "\": only F32, F16 and BF16 sources can be exported");
    }
    by_name[t.name] = &t;
  }
  if (options.type) {
    const GgmlType ty = *options.type;
    if (ty != GgmlType::kF32 && ty != GgmlType::kF16 && ty != GgmlType::kBF16 &&
        ty != GgmlType::kQ8_0 && ty != GgmlType::kQ4_0) {
      return InvalidArgumentError(path + ": GGUF export type " +
                                  std::string(storage::GgmlTypeName(ty)) +
                                  " is not supported; use F32, F16, BF16, Q8_0 or Q4_0");
    }
  }
  std::vector<PlannedTensor> plan;
  std::map<std::string, bool> used;
  auto take = [&](const std::string& hf_name) -> const HfTensorView* {
    auto it = by_name.find(hf_name);
    if (it == by_name.end()) return nullptr;
    used[hf_name] = true;
    return it->second;
  };
  if (const HfTensorView* v = take("model.embed_tokens.weight")) {
    plan.push_back({"token_embd.weight", {v}, 0, false});
  }
  const std::vector<NamePair> layer_names = LayerNames(family);
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    const std::string blk = "blk." + std::to_string(l) + ".";
    for (const NamePair& p : layer_names) {
      if (const HfTensorView* v = take(prefix + p.hf)) {
        const bool gate = p.gguf == "ffn_gate_inp.weight" || p.gguf == "ffn_gate_inp_shexp.weight";
        plan.push_back({blk + p.gguf, {v}, PermuteHeads(family, c, p.hf), gate});
      }
    }
    if (!c.IsMoeLayer(l)) continue;
    for (const ExpertName& e : ExpertNames(family)) {
      PlannedTensor stack{blk + e.stack + ".weight", {}, 0, false};
      for (int x = 0; x < c.num_experts; ++x) {
        const std::string name =
            prefix + ExpertPrefix(family) + std::to_string(x) + "." + e.proj + ".weight";
        const HfTensorView* v = take(name);
        if (v == nullptr) {
          return NotFoundError(path + ": tensor \"" + name +
                               "\" is missing; every expert of "
                               "an MoE layer is needed to write " +
                               stack.gguf_name);
        }
        if (!stack.sources.empty() &&
            (v->shape != stack.sources[0]->shape || v->type != stack.sources[0]->type)) {
          return InvalidArgumentError(path + ": tensor \"" + name +
                                      "\" differs in shape or dtype from expert 0's");
        }
        stack.sources.push_back(v);
      }
      plan.push_back(std::move(stack));
    }
  }
  if (const HfTensorView* v = take("model.norm.weight")) {
    plan.push_back({"output_norm.weight", {v}, 0, false});
  }
  if (const HfTensorView* v = take("lm_head.weight")) {
    if (!c.tie_word_embeddings) plan.push_back({"output.weight", {v}, 0, false});
  }
  // llama.cpp's olmoe requires output.weight: a tied OLMoE gets the embedding again under that
  // name, and kGgufTiedOutputKey says it is that copy, so that reading the file ties again.
  const bool tied_copy = c.tie_word_embeddings && NeedsOutputTensor(family);
  if (tied_copy && by_name.count("model.embed_tokens.weight")) {
    plan.push_back({"output.weight", {by_name["model.embed_tokens.weight"]}, 0, false});
  }
  for (const HfTensorView& t : tensors) {
    if (!used.count(t.name) && t.name.find("rotary_emb.inv_freq") == std::string::npos) {
      return InvalidArgumentError(path + ": tensor \"" + t.name + "\" has no GGUF name for a " +
                                  std::string(HfFamilyModelType(family)) + " model");
    }
  }

  std::vector<storage::GgufTensorToWrite> out;
  for (const PlannedTensor& p : plan) {
    const HfTensorView& first = *p.sources[0];
    if (first.shape.empty() || first.shape.size() > 2) {
      return InvalidArgumentError(path + ": tensor \"" + first.name + "\" has " +
                                  std::to_string(first.shape.size()) +
                                  " dimensions; expected 1 or 2");
    }
    int64_t numel = 1;
    for (int64_t d : first.shape) numel *= d;
    if (first.bytes.size() !=
        static_cast<size_t>(numel) * static_cast<size_t>(storage::GgmlTypeSize(first.type))) {
      return InvalidArgumentError(path + ": tensor \"" + first.name + "\" has " +
                                  std::to_string(first.bytes.size()) +
                                  " bytes, which does not match its shape and dtype");
    }
    std::vector<int64_t> ne(first.shape.rbegin(), first.shape.rend());
    if (p.sources.size() > 1) ne.push_back(static_cast<int64_t>(p.sources.size()));
    GgmlType type = options.type.value_or(first.type);
    const bool quantized = type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0;
    if (quantized && (ne.size() < 2 || ne[0] % 32 != 0 || p.keep_f32)) type = GgmlType::kF32;
    const std::string what = path + ": tensor \"" + first.name + "\"";
    storage::GgufTensorToWrite w;
    w.name = p.gguf_name;
    w.type = type;
    w.ne = ne;
    const PlannedTensor* planned = &p;
    w.fill = [planned, type, what](std::span<uint8_t> dst) -> Status {
      const HfTensorView& src0 = *planned->sources[0];
      const size_t row = src0.shape.size() == 2 ? static_cast<size_t>(src0.shape[1]) : 1;
      if (type == src0.type) {  // a copy, permuted where llama.cpp's RoPE needs it
        size_t at = 0;
        for (const HfTensorView* v : planned->sources) {
          std::memcpy(dst.data() + at, v->bytes.data(), v->bytes.size());
          at += v->bytes.size();
        }
        if (planned->permute_heads > 0) {
          return PermuteRows(dst, row * static_cast<size_t>(storage::GgmlTypeSize(type)),
                             planned->permute_heads, /*to_gguf=*/true, what);
        }
        return Status::Ok();
      }
      size_t per = src0.bytes.size() / static_cast<size_t>(storage::GgmlTypeSize(src0.type));
      std::vector<float> f32(per * planned->sources.size());
      for (size_t k = 0; k < planned->sources.size(); ++k) {
        SY_RETURN_IF_ERROR(ViewToF32(*planned->sources[k], {f32.data() + k * per, per}));
      }
      if (planned->permute_heads > 0) {
        std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(f32.data()), f32.size() * 4);
        SY_RETURN_IF_ERROR(
            PermuteRows(bytes, row * sizeof(float), planned->permute_heads, true, what));
      }
      const size_t n = f32.size();
      if (type == GgmlType::kF32) {
        std::memcpy(dst.data(), f32.data(), n * 4);
      } else if (type == GgmlType::kF16) {
        ConvertF32ToF16(f32.data(), reinterpret_cast<F16*>(dst.data()), n);
      } else if (type == GgmlType::kBF16) {
        ConvertF32ToBF16(f32.data(), reinterpret_cast<BF16*>(dst.data()), n);
      } else {
        return storage::QuantizeFromF32(type, f32, dst);
      }
      return Status::Ok();
    };
    out.push_back(std::move(w));
  }
  std::vector<GgufKeyValue> metadata = GgufModelMetadata(hf, options.name);
  if (tied_copy) metadata.push_back({std::string(kGgufTiedOutputKey), GgufValue::Bool(true)});
  // general.file_type: llama.cpp's llama_ftype of the bulk of the weights.
  const GgmlType main_type =
      options.type.value_or(plan.empty() ? GgmlType::kF32 : plan[0].sources[0]->type);
  const uint32_t ftype = main_type == GgmlType::kF16    ? 1
                         : main_type == GgmlType::kQ4_0 ? 2
                         : main_type == GgmlType::kQ8_0 ? 7
                         : main_type == GgmlType::kBF16 ? 32
                                                        : 0;
  metadata.insert(metadata.begin() + 2, {"general.file_type", GgufValue::U32(ftype)});
  for (const GgufKeyValue& kv : options.extra_metadata) metadata.push_back(kv);
  return storage::WriteGguf(path, metadata, out, options.replace_existing);
}

Status ExportHfDirToGguf(const std::string& hf_dir, const std::string& path,
                         const GgufExportOptions& options) {
  SY_ASSIGN_OR_RETURN(HfModelConfig hf, LoadHfConfig(hf_dir));
  SY_ASSIGN_OR_RETURN(auto ckpt, storage::SafetensorsCheckpoint::Open(hf_dir));
  std::vector<HfTensorView> views;
  for (const std::string& name : ckpt->TensorNames()) {
    SY_ASSIGN_OR_RETURN(storage::TensorBytes t, ckpt->Get(name));
    HfTensorView v;
    v.name = name;
    const storage::SafetensorsDType dtype = t.info->dtype;
    if (dtype == storage::SafetensorsDType::kF32) {
      v.type = GgmlType::kF32;
    } else if (dtype == storage::SafetensorsDType::kF16) {
      v.type = GgmlType::kF16;
    } else if (dtype == storage::SafetensorsDType::kBF16) {
      v.type = GgmlType::kBF16;
    } else {
      return InvalidArgumentError(*t.file + ": tensor \"" + name + "\" is " +
                                  std::string(storage::SafetensorsDTypeName(dtype)) +
                                  "; only F32, F16 and BF16 checkpoints export to GGUF");
    }
    v.shape = t.info->shape;
    v.bytes = t.bytes;
    views.push_back(std::move(v));
  }
  return WriteGgufFromHf(hf, views, path, options);
}

Result<LoadedModel> LoadGgufModel(Backend& backend, const std::string& path,
                                  const LoadOptions& options) {
  SY_ASSIGN_OR_RETURN(auto ckpt, GgufCheckpoint::Open(path));
  return LoadModelFromSource(backend, ckpt->config(), *ckpt, options);
}

bool IsGgufPath(const std::string& path) {
  // Never blocks: a FIFO or a device there is not a GGUF (its reader then says what it is).
  Result<UniqueFd> fd = OpenRegularFile(path);
  if (!fd.ok()) return false;
  char magic[4] = {};
  return ::pread(fd->get(), magic, 4, 0) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace sy
