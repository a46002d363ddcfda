#include "launcher/convert/hf_format.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "inference/model_loader.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/read_file.h"
#include "runtime/core/temporary_cleanup.h"
#include "storage/formats/safetensors.h"
#include "storage/formats/safetensors_writer.h"
#include "storage/hdf5/durable_replace.h"

namespace sy::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr HfFamily kFamilies[] = {HfFamily::kMixtral, HfFamily::kQwen2Moe, HfFamily::kQwen3Moe,
                                  HfFamily::kOlmoe,   HfFamily::kDeepseek, HfFamily::kGlm4Moe};

// Qwen's decoder_sparse_step / mlp_only_layers for our first_k_dense / moe_every, or "" when
// they cannot express it.
std::string QwenSparsity(const ModelConfig& c, int64_t* step, std::vector<int>* mlp_only) {
  if (c.first_k_dense == c.moe_every - 1) {
    *step = c.moe_every;
    return "";
  }
  if (c.moe_every == 1) {
    *step = 1;
    for (int l = 0; l < c.first_k_dense; ++l) mlp_only->push_back(l);
    return "";
  }
  return "first_k_dense " + std::to_string(c.first_k_dense) + " with moe_every " +
         std::to_string(c.moe_every);
}

// "" when `c` is expressible as `family`, else the first feature that is not.
std::string Mismatch(HfFamily family, const ModelConfig& c) {
  const bool default_head = c.head_dim == 0 || c.head_dim == c.hidden_size / c.num_heads;
  const bool same_bias = c.attention_bias == c.attention_out_bias;
  const bool all_moe = c.first_k_dense == 0 && c.moe_every == 1;
  int64_t step = 0;
  std::vector<int> mlp_only;
  const bool sigmoid = c.router_scoring == RouterScoring::kSigmoid;
  const bool partial_rotary = c.rotary_dim != 0 && c.rotary_dim != c.dim_per_head();
  if (family != HfFamily::kGlm4Moe) {
    if (sigmoid) return "sigmoid routing";
    if (partial_rotary) return "partial rotary (rotary_dim " + std::to_string(c.rotary_dim) + ")";
  }
  switch (family) {
    case HfFamily::kGlm4Moe:
      if (!sigmoid) return "softmax routing";
      if (c.qk_norm && !c.qk_norm_per_head) return "a whole-projection qk_norm";
      if (c.attention_out_bias) return "a bias on the output projection";
      if (c.shared_expert_gate) return "a shared-expert gate";
      if (c.num_shared_experts > 0 && c.shared_expert_intermediate_size != 0 &&
          c.shared_expert_intermediate_size != c.moe_intermediate_size) {
        return "shared_expert_intermediate_size different from moe_intermediate_size";
      }
      if (c.moe_every != 1) return "moe_every " + std::to_string(c.moe_every);
      return "";
    case HfFamily::kMixtral:
      if (c.qk_norm) return "qk_norm";
      if (c.attention_bias || c.attention_out_bias) return "attention biases";
      if (c.num_shared_experts > 0) return "shared experts";
      if (!c.norm_topk_prob) return "norm_topk_prob false";
      if (!all_moe) return "dense layers";
      return "";
    case HfFamily::kQwen2Moe:
      if (c.qk_norm) return "qk_norm";
      if (c.attention_out_bias) return "a bias on the output projection";
      if (c.num_shared_experts != 1 || !c.shared_expert_gate) {
        return "no single gated shared expert";
      }
      if (!default_head) return "head_dim " + std::to_string(c.head_dim);
      return QwenSparsity(c, &step, &mlp_only);
    case HfFamily::kQwen3Moe:
      if (!c.qk_norm || !c.qk_norm_per_head) return "no per-head qk_norm";
      if (!same_bias) return "q/k/v biases without an output bias";
      if (c.num_shared_experts > 0) return "shared experts";
      return QwenSparsity(c, &step, &mlp_only);
    case HfFamily::kOlmoe:
      if (!c.qk_norm || c.qk_norm_per_head) return "no whole-projection qk_norm";
      if (!same_bias) return "q/k/v biases without an output bias";
      if (c.num_shared_experts > 0) return "shared experts";
      if (!all_moe) return "dense layers";
      if (!default_head) return "head_dim " + std::to_string(c.head_dim);
      return "";
    case HfFamily::kDeepseek:
      if (c.qk_norm) return "qk_norm";
      if (!same_bias) return "q/k/v biases without an output bias";
      if (c.shared_expert_gate) return "a shared-expert gate";
      if (c.num_shared_experts > 0 && c.shared_expert_intermediate_size != 0 &&
          c.shared_expert_intermediate_size != c.moe_intermediate_size) {
        return "shared_expert_intermediate_size different from moe_intermediate_size";
      }
      if (c.first_k_dense % c.moe_every != 0) return "moe_every not dividing first_k_dense";
      if (!default_head) return "head_dim " + std::to_string(c.head_dim);
      return "";
  }
  return "an unknown family";
}

// The keys DeepSeek's config.json and GLM-4.5's spell alike: the experts, the dense layers before
// them, the top-k renormalisation and the attention bias.
void PutDeepseekExperts(const ModelConfig& c, json& arch) {
  arch["n_routed_experts"] = c.num_experts;
  arch["intermediate_size"] =
      c.intermediate_size > 0 ? c.intermediate_size : c.moe_intermediate_size;
  arch["moe_intermediate_size"] = c.moe_intermediate_size;
  arch["first_k_dense_replace"] = c.first_k_dense;
  arch["norm_topk_prob"] = c.norm_topk_prob;
  arch["attention_bias"] = c.attention_bias;
}

DType FromSafetensors(storage::SafetensorsDType t) {
  switch (t) {
    case storage::SafetensorsDType::kF32:
      return DType::kF32;
    case storage::SafetensorsDType::kBF16:
      return DType::kBF16;
    case storage::SafetensorsDType::kF16:
      return DType::kF16;
    case storage::SafetensorsDType::kBool:
    case storage::SafetensorsDType::kU8:
    case storage::SafetensorsDType::kI8:
    case storage::SafetensorsDType::kF8E4M3:
    case storage::SafetensorsDType::kF8E5M2:
    case storage::SafetensorsDType::kI16:
    case storage::SafetensorsDType::kU16:
    case storage::SafetensorsDType::kI32:
    case storage::SafetensorsDType::kU32:
    case storage::SafetensorsDType::kF64:
    case storage::SafetensorsDType::kI64:
    case storage::SafetensorsDType::kU64:
      break;
  }
  return DType::kI8;  // not a weight dtype; the caller rejects it
}

storage::SafetensorsDType ToSafetensors(DType t) {
  switch (t) {
    case DType::kF32:
      return storage::SafetensorsDType::kF32;
    case DType::kBF16:
      return storage::SafetensorsDType::kBF16;
    case DType::kF16:
      return storage::SafetensorsDType::kF16;
    case DType::kI32:
      return storage::SafetensorsDType::kI32;
    case DType::kI64:
      return storage::SafetensorsDType::kI64;
    case DType::kU8:
      return storage::SafetensorsDType::kU8;
    case DType::kI8:
      return storage::SafetensorsDType::kI8;
    case DType::kF64:
      return storage::SafetensorsDType::kF64;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      break;
  }
  SY_CHECK(false) << "no safetensors dtype for " << DTypeName(t);
  return storage::SafetensorsDType::kF32;
}

std::string TorchDType(DType t) {
  return t == DType::kBF16 ? "bfloat16" : t == DType::kF16 ? "float16" : "float32";
}

Status WriteSmallFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr) return ErrnoError("create", path, errno);
  const bool ok = text.empty() || std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) return ErrnoError("write", path, ok ? errno : err);
  return FsyncFile(path);
}

class Hf final : public ModelFormat {
 public:
  std::string_view name() const override { return "hf"; }

  bool Detect(const std::string& path) const override {
    std::error_code ec;
    return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec) &&
           (fs::exists(fs::path(path) / "model.safetensors", ec) ||
            fs::exists(fs::path(path) / "model.safetensors.index.json", ec));
  }

  Result<ModelImage> Read(const std::string& path) const override {
    ModelImage image;
    image.format = "hf";
    image.path = path;
    SY_ASSIGN_OR_RETURN(HfModelConfig hf, LoadHfConfig(path));
    SY_ASSIGN_OR_RETURN(std::unique_ptr<storage::SafetensorsCheckpoint> owned,
                        storage::SafetensorsCheckpoint::Open(path));
    std::shared_ptr<storage::SafetensorsCheckpoint> ckpt(std::move(owned));
    image.source = ckpt;
    ResolveConfigAgainstCheckpoint(*ckpt, hf);
    image.config = hf.config;
    for (std::string_view file : kHfSideFiles) {
      const std::string p = path + "/" + std::string(file);
      std::error_code ec;
      if (!fs::is_regular_file(p, ec)) continue;
      SY_ASSIGN_OR_RETURN(image.hf_files[std::string(file)], ReadFile(p));
    }
    std::set<std::string> used;
    for (const ParameterSpec& p : ModelParameterSpecs(image.config)) {
      const std::string hf_name = HfTensorName(hf.family, p.name);
      if (hf_name.empty()) {
        return UnimplementedError(path + ": parameter " + p.name + " has no " +
                                  std::string(HfFamilyDisplayName(hf.family)) + " tensor");
      }
      Result<storage::TensorBytes> bytes = ckpt->Get(hf_name);
      if (!bytes.ok()) {
        return NotFoundError(path + ": tensor \"" + hf_name + "\" is missing (needed for " +
                             p.name + "); the checkpoint does not match config.json");
      }
      const storage::SafetensorsTensorInfo& info = *bytes->info;
      if (info.shape != p.shape) {
        return InvalidArgumentError(*bytes->file + ": tensor \"" + hf_name + "\" has shape " +
                                    Shape{std::span<const int64_t>(info.shape)}.ToString() +
                                    ", config.json implies " +
                                    Shape{std::span<const int64_t>(p.shape)}.ToString());
      }
      const DType dtype = FromSafetensors(info.dtype);
      if (dtype == DType::kI8) {
        return InvalidArgumentError(*bytes->file + ": tensor \"" + hf_name + "\" has dtype " +
                                    std::string(storage::SafetensorsDTypeName(info.dtype)) +
                                    "; weights must be F32, BF16 or F16");
      }
      ImageTensor t;
      t.name = p.name;
      t.stored_name = hf_name;
      t.dtype = dtype;
      t.shape = p.shape;
      t.read = [ckpt, hf_name](std::span<uint8_t> out) -> Status {
        SY_ASSIGN_OR_RETURN(storage::TensorBytes b, ckpt->Get(hf_name));
        if (b.bytes.size() != out.size()) {
          return InternalError(*b.file + ": tensor \"" + hf_name + "\" size changed");
        }
        std::copy(b.bytes.begin(), b.bytes.end(), out.begin());
        return Status::Ok();
      };
      if (p.name == "embed_tokens") image.hf_dtype = dtype;
      image.tensors.push_back(std::move(t));
      used.insert(hf_name);
    }
    size_t trailing = 0;
    for (const std::string& name : ckpt->TensorNames()) {
      if (used.count(name)) continue;
      if (name.size() >= 19 && name.compare(name.size() - 19, 19, "rotary_emb.inv_freq") == 0) {
        continue;
      }
      if (name == "lm_head.weight" && image.config.tie_word_embeddings) continue;
      if (InUnusedTrailingLayer(hf, name)) {
        ++trailing;
        continue;
      }
      return InvalidArgumentError(path + ": unexpected tensor \"" + name + "\" for a " +
                                  std::string(HfFamilyModelType(hf.family)) +
                                  " model with this config.json");
    }
    if (trailing > 0) {
      image.notes.push_back(path + ": left out the " + std::to_string(trailing) +
                            " tensors of the multi-token-prediction layers "
                            "(num_nextn_predict_layers), which the forward does not use");
    }
    return image;
  }

  Status Write(const ModelImage& image, const std::string& out,
               const WriteOptions& options) const override {
    std::optional<HfFamily> preferred;
    std::string original;
    if (auto it = image.hf_files.find("config.json"); it != image.hf_files.end()) {
      original = it->second;
      Result<HfModelConfig> parsed = ParseHfConfig(original, "the source's config.json");
      if (parsed.ok()) preferred = parsed->family;
    }
    SY_ASSIGN_OR_RETURN(HfFamily family, ChooseHfFamily(image.config, preferred));
    SY_RETURN_IF_ERROR(RefuseExistingOutput(out));
    ScopedTemporary guard(TemporaryPathFor(out));
    const std::string staging = guard.path();
    SY_RETURN_IF_ERROR(CreateNewDirectory(staging).WithContext("the staging directory of " + out));

    std::vector<storage::SafetensorsTensorSource> sources;
    DType main_dtype = DType::kF32;
    size_t skipped = 0;
    for (const ImageTensor& t : image.tensors) {
      if (t.name.rfind("optim/", 0) == 0) {
        ++skipped;
        continue;
      }
      storage::SafetensorsTensorSource s;
      s.name = HfTensorName(family, t.name);
      if (s.name.empty()) {
        return UnimplementedError(out + ": tensor " + t.name + " has no " +
                                  std::string(HfFamilyDisplayName(family)) + " name");
      }
      const DType dtype = options.dtype                                ? *options.dtype
                          : image.hf_dtype && IsFloatingPoint(t.dtype) ? *image.hf_dtype
                                                                       : t.dtype;
      if (t.name == "embed_tokens") main_dtype = dtype;
      s.dtype = ToSafetensors(dtype);
      s.shape = t.shape;
      const ImageTensor* src = &t;
      s.fill = [src, dtype](std::span<uint8_t> bytes) { return ReadTensorAs(*src, dtype, bytes); };
      sources.push_back(std::move(s));
    }
    if (skipped > 0 && options.progress) {
      options.progress("hf: " + std::to_string(skipped) +
                       " optimizer-state tensors left out (a Hugging Face checkpoint holds "
                       "weights only)");
    }
    storage::SafetensorsWriteOptions st;
    st.shard_bytes = options.shard_bytes;
    uint64_t next_report = 256u << 20;
    if (options.progress) {
      st.progress = [&](uint64_t done, uint64_t total) {
        if (done >= next_report || done == total) {
          options.progress("hf: wrote " + std::to_string(done >> 20) + " of " +
                           std::to_string(total >> 20) + " MiB");
          while (next_report <= done) next_report += 256u << 20;
        }
      };
    }
    Result<std::vector<std::string>> files = storage::WriteSafetensors(staging, sources, st);
    if (!files.ok()) return files.status().WithContext("writing " + out);

    SY_ASSIGN_OR_RETURN(std::string config,
                        HfConfigJson(family, image.config, preferred == family ? original : "",
                                     TorchDType(main_dtype)));
    SY_RETURN_IF_ERROR(WriteSmallFile(staging + "/config.json", config));
    std::string generation;
    if (auto it = image.hf_files.find("generation_config.json"); it != image.hf_files.end()) {
      generation = it->second;
    } else {
      const json c = json::parse(config);
      json g = {{"_from_model_config", true},
                {"transformers_version", std::string(kTransformersVersion)}};
      for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
        if (c.contains(key) && !c[key].is_null()) g[key] = c[key];
      }
      generation = g.dump(2) + "\n";
    }
    SY_RETURN_IF_ERROR(WriteSmallFile(staging + "/generation_config.json", generation));
    for (const auto& [file, text] : image.hf_files) {
      if (file == "config.json" || file == "generation_config.json") continue;
      bool known = false;
      for (std::string_view f : kHfSideFiles) known = known || f == file;
      if (!known) continue;  // only plain names from the known list land in the directory
      SY_RETURN_IF_ERROR(WriteSmallFile(staging + "/" + file, text));
    }
    SY_RETURN_IF_ERROR(FsyncParentDirectory(staging + "/config.json"));
    if (Status placed = RenameNoReplace(staging, out); !placed.ok()) {
      if (placed.code() == StatusCode::kAlreadyExists) {
        return AlreadyExistsError(out + " appeared while converting; nothing was written there");
      }
      return placed;
    }
    guard.Release();
    return FsyncParentDirectoryAfterRename(out);
  }
};

}  // namespace

Result<HfFamily> ChooseHfFamily(const ModelConfig& config, std::optional<HfFamily> preferred) {
  if (config.num_experts == 0) {
    return UnimplementedError(
        "the model has no experts (num_experts 0); the Hugging Face families Switchyard "
        "exports (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-MoE) are all MoE models");
  }
  if (config.pregate) {
    return UnimplementedError(
        "the model is pre-gated (pregate true); no Hugging Face family has pre-gates. Export the "
        "conventional model and load it with `generate --pregate`");
  }
  if (preferred && Mismatch(*preferred, config).empty()) return *preferred;
  std::string why;
  for (HfFamily f : kFamilies) {
    const std::string m = Mismatch(f, config);
    if (m.empty()) return f;
    why +=
        std::string(why.empty() ? "" : "; ") + std::string(HfFamilyDisplayName(f)) + " has no " + m;
  }
  return UnimplementedError("the model's architecture matches no Hugging Face family: " + why);
}

Result<std::string> HfConfigJson(HfFamily family, const ModelConfig& c, const std::string& original,
                                 std::string_view torch_dtype) {
  const std::string m = Mismatch(family, c);
  if (!m.empty()) {
    return UnimplementedError(std::string(HfFamilyDisplayName(family)) + " has no " + m);
  }
  const int64_t head_dim = c.dim_per_head();
  // Defaults of the keys that do not describe the architecture, as transformers writes them.
  json defaults = {{"attention_dropout", 0.0},
                   {"hidden_act", "silu"},
                   {"initializer_range", 0.02},
                   {"output_router_logits", false},
                   {"use_cache", true}};
  json arch = {{"model_type", std::string(HfFamilyModelType(family))},
               {"vocab_size", c.vocab_size},
               {"hidden_size", c.hidden_size},
               {"num_hidden_layers", c.num_layers},
               {"num_attention_heads", c.num_heads},
               {"num_key_value_heads", c.kv_heads()},
               {"num_experts_per_tok", c.top_k},
               {"rms_norm_eps", c.rms_norm_eps},
               {"rope_theta", c.rope_theta},
               {"tie_word_embeddings", c.tie_word_embeddings},
               {"torch_dtype", std::string(torch_dtype)},
               {"transformers_version", std::string(kTransformersVersion)}};
  int64_t step = 1;
  std::vector<int> mlp_only;
  switch (family) {
    case HfFamily::kMixtral:
      arch["architectures"] = {"MixtralForCausalLM"};
      arch["num_local_experts"] = c.num_experts;
      arch["intermediate_size"] = c.moe_intermediate_size;
      arch["head_dim"] = head_dim;
      arch["router_aux_loss_coef"] = c.router_aux_loss_coef;
      defaults.update({{"bos_token_id", 1},
                       {"eos_token_id", 2},
                       {"max_position_embeddings", 131072},
                       {"router_jitter_noise", 0.0},
                       {"sliding_window", nullptr}});
      break;
    case HfFamily::kQwen2Moe:
    case HfFamily::kQwen3Moe:
      (void)QwenSparsity(c, &step, &mlp_only);
      arch["architectures"] = {family == HfFamily::kQwen2Moe ? "Qwen2MoeForCausalLM"
                                                             : "Qwen3MoeForCausalLM"};
      arch["num_experts"] = c.num_experts;
      arch["intermediate_size"] =
          c.intermediate_size > 0 ? c.intermediate_size : c.moe_intermediate_size;
      arch["moe_intermediate_size"] = c.moe_intermediate_size;
      arch["norm_topk_prob"] = c.norm_topk_prob;
      arch["decoder_sparse_step"] = step;
      arch["mlp_only_layers"] = mlp_only;
      arch["router_aux_loss_coef"] = c.router_aux_loss_coef;
      arch["rope_scaling"] = nullptr;
      arch["use_sliding_window"] = false;
      arch["sliding_window"] = nullptr;  // transformers drops the window when it is unused
      defaults.update({{"max_position_embeddings", 32768}, {"max_window_layers", 28}});
      if (family == HfFamily::kQwen2Moe) {
        arch["shared_expert_intermediate_size"] = c.shared_intermediate();
        if (!c.attention_bias) arch["qkv_bias"] = false;
      } else {
        arch["head_dim"] = head_dim;
        arch["attention_bias"] = c.attention_bias;
      }
      break;
    case HfFamily::kOlmoe:
      arch["architectures"] = {"OlmoeForCausalLM"};
      arch["num_experts"] = c.num_experts;
      arch["intermediate_size"] = c.moe_intermediate_size;
      arch["norm_topk_prob"] = c.norm_topk_prob;
      arch["attention_bias"] = c.attention_bias;
      arch["router_aux_loss_coef"] = c.router_aux_loss_coef;
      arch["rope_scaling"] = nullptr;
      arch["clip_qkv"] = nullptr;
      defaults.update(
          {{"eos_token_id", 50279}, {"pad_token_id", 1}, {"max_position_embeddings", 4096}});
      break;
    case HfFamily::kGlm4Moe:
      arch["architectures"] = {"Glm4MoeForCausalLM"};
      PutDeepseekExperts(c, arch);
      arch["n_shared_experts"] = c.num_shared_experts;
      arch["use_qk_norm"] = c.qk_norm;
      arch["head_dim"] = head_dim;
      arch["n_group"] = c.num_expert_groups;
      arch["topk_group"] = c.topk_groups;
      arch["routed_scaling_factor"] = c.routed_scaling_factor;
      arch["partial_rotary_factor"] =
          static_cast<double>(c.rotary_dim > 0 ? c.rotary_dim : head_dim) /
          static_cast<double>(head_dim);
      arch["rope_scaling"] = nullptr;
      arch["num_nextn_predict_layers"] = 0;
      defaults.update({{"max_position_embeddings", 131072}});
      break;
    case HfFamily::kDeepseek:
      arch["architectures"] = {"DeepseekForCausalLM"};
      PutDeepseekExperts(c, arch);
      arch["n_shared_experts"] =
          c.num_shared_experts > 0 ? json(c.num_shared_experts) : json(nullptr);
      arch["moe_layer_freq"] = c.moe_every;
      arch["scoring_func"] = "softmax";
      arch["rope_scaling"] = nullptr;
      defaults.update(
          {{"auto_map",
            {{"AutoConfig", "configuration_deepseek.DeepseekConfig"},
             {"AutoModel", "modeling_deepseek.DeepseekModel"},
             {"AutoModelForCausalLM", "modeling_deepseek.DeepseekForCausalLM"}}},
           {"aux_loss_alpha", c.router_aux_loss_coef > 0 ? c.router_aux_loss_coef : 0.001},
           {"bos_token_id", 100000},
           {"eos_token_id", 100001},
           {"max_position_embeddings", 4096},
           {"pretraining_tp", 1},
           {"seq_aux", true}});
      break;
  }
  json out = defaults;
  if (!original.empty()) {
    json from = json::parse(original, nullptr, false);
    if (from.is_object()) out.update(from);
  }
  out.update(arch);
  return out.dump(2) + "\n";
}

const ModelFormat& HfFormat() {
  static const Hf format;
  return format;
}

}  // namespace sy::convert
