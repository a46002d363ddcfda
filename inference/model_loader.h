// LoadHfModel: a Hugging Face model directory (config.json + safetensors, single or sharded) ->
// a forward-only MoeModel on a backend.
//
// Tensor names are the families' real on-disk names (model.layers.L.self_attn.q_proj.weight,
// Mixtral's block_sparse_moe.experts.E.w1/w2/w3 = gate/down/up, Qwen's mlp.shared_expert.* and
// mlp.shared_expert_gate, DeepSeek's mlp.shared_experts.*, ...); HfTensorName gives the mapping
// for each of our parameter names. No weight is transposed or permuted:
//   - nn.Linear stores [out, in], as our ParameterStore does (runtime/model/parameter_store.h).
//   - Hugging Face's RoPE rotates the halves (rotate_half: pairs (i, i + d/2)), and so does our
//     Backend::Rope, so q_proj / k_proj rows load as they are. (GGUF's interleaved layout would
//     need the permutation; safetensors from Hugging Face does not.)
// Every parameter must be found with exactly its shape; every tensor in the checkpoint must be
// used (except rotary_emb.inv_freq buffers, and lm_head.weight of a tied model); otherwise the
// error names the tensor. Weights are converted from the file's dtype (F32, F16, BF16, F64) to
// LoadOptions::weight_dtype; the routed experts to LoadOptions::expert_dtype, which may be
// quantized (q8_0, q4_0, a k-quant): a file's own blocks of that type are copied as they
// are, other values quantized on load. Dense matrices a file stores quantized stay quantized
// (LoadOptions::keep_quantized_matrices).
//
// Experts on the host (LoadOptions::experts_on_host): the routed experts are converted straight
// into pinned host memory (offload::HostExperts, one allocation per MoE layer) and never
// allocated on the device; the model is built with ModelOptions::routed_experts = false, so its
// MoE layers hold no expert weights and fail until an expert provider that fetches experts is
// installed with the host tier (ExpertProvider::set_host_experts(loaded.host_experts) before
// Install). The device then holds only the non-expert weights. `resident` needs the experts on
// the device: load without the option for it.
//
// Ownership: LoadedModel owns its model, which lives on the backend passed in (the backend must
// outlive it). The checkpoint's memory maps are released before LoadHfModel returns.
// Thread-safety: LoadHfModel drives the backend's compute stream; call it from that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inference/hf_config.h"
#include "inference/offload/host_experts.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy {
namespace storage {
class SafetensorsCheckpoint;
}  // namespace storage

struct LoadOptions {
  // Storage dtype of the loaded weights (f32, bf16 or f16). Default: f32.
  DType weight_dtype = DType::kF32;
  // Storage dtype of the routed experts (ModelOptions::expert_weight_dtype): f32, bf16, f16, or
  // quantized (q8_0, q4_0 or a k-quant) while attention and the rest stay in weight_dtype. An
  // expert tensor the file already stores in exactly that quantized type is copied block for
  // block (a GGUF's Q8_0 / Q4_0 / Q4_K / Q5_K / Q6_K); any other is read as f32 and quantized
  // here (q8_0 and q4_0 only: the k-quants have no quantizer). Unset: the type the file stores
  // the experts in, when every one is in blocks of a type with kernels here that the rows fill and
  // the backend takes quantized weights (a quantized GGUF loads with no requantizing): one type
  // for all, or, when the file mixes them (a Q4_K_M GGUF's Q4_K gate and up with some layers' down
  // projections in Q6_K), each layer's matrices in their own (ModelOptions::expert_layer_dtypes;
  // with experts_on_host, whose layout holds one type, all in q8_0); q8_0 when the file stores
  // them in blocks of a type without kernels here or that the rows do not fill; else
  // weight_dtype. Default: unset.
  std::optional<DType> expert_dtype;
  // Dense matrices (runtime/model/dense_matrices.h: the attention projections, the dense and
  // shared-expert FFNs, the untied LM head) that the file stores in quantized blocks stay
  // quantized (ModelOptions::matrix_dtypes), so that decode reads as few bytes as the file holds:
  // Q8_0, Q4_0 and Q2_K ... Q6_K block for block; a block type without kernels here that
  // converts to f32 would be requantized to q8_0 from its values (none does today: the other
  // ggml types, Q4_1, Q5_0, the IQ types and MXFP4, do not load). A matrix whose rows are
  // not whole blocks, and every matrix on a backend without quantized kernels
  // (Backend::caps().quantized_weights: cuda), loads in weight_dtype. The routers, embeddings and
  // norms always load in weight_dtype (llama.cpp's quantizer keeps the routers unquantized too). A
  // safetensors checkpoint holds no blocks: nothing changes there. false: every dense matrix in
  // weight_dtype. Default: true.
  bool keep_quantized_matrices = true;
  // Load the routed experts into pinned host memory (LoadedModel::host_experts) instead of onto
  // the device. Default: false (every weight on the device).
  bool experts_on_host = false;
  // Load a conventional checkpoint as a pre-gated model (Pre-gated MoE, IV-B; the `pregated`
  // policy needs one): MoE layer m's pre-gate is MoE layer m + 1's gate
  // (runtime/model/pregate_init.h), without the paper's fine-tuning, so the routing of MoE layers
  // m >= 1 reads the previous layer's input; the load logs a warning that the model is altered.
  // InvalidArgument for a model with fewer than two MoE layers. Default: false.
  bool pregate = false;
  // Called after each tensor is loaded with (values loaded, values to load), for a progress
  // line (runtime/core/progress.h). Default: none.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct LoadedModel {
  HfModelConfig hf;
  std::unique_ptr<MoeModel> model;
  // With experts_on_host: every routed expert, in weight_dtype, on the model's backend's pinned
  // host memory. Null otherwise.
  std::shared_ptr<offload::HostExperts> host_experts;
};

// The Hugging Face tensor name of our parameter `name` for `family`, or "" when it has none.
std::string HfTensorName(HfFamily family, const std::string& name);

// Settles what config.json leaves to the files: a Qwen2-MoE config without "qkv_bias" over a
// checkpoint with no q_proj bias has no q/k/v bias (HfModelConfig::attention_bias_from_checkpoint).
void ResolveConfigAgainstCheckpoint(const storage::SafetensorsCheckpoint& ckpt, HfModelConfig& hf);

// Copies `values` (f32, param.value.numel() of them, host memory) into `param.value`, converted
// to its dtype through `scratch` (host staging, reused between calls), and waits for the copy on
// the compute stream. Shared by every checkpoint loader.
Status UploadParameter(Backend& backend, Parameter& param, std::span<const float> values,
                       std::vector<uint16_t>& scratch);

// A checkpoint's tensors under their Hugging Face names, whatever the file format: a safetensors
// checkpoint, or a GGUF file seen through inference/gguf_model.h. Implementations are immutable
// after construction and may be read from any thread.
class HfTensorSource {
 public:
  virtual ~HfTensorSource() = default;
  // The path errors name ("DIR" for safetensors, "x.gguf" for GGUF).
  virtual const std::string& where() const = 0;
  // Where the config came from, for errors: "config.json", "the GGUF metadata".
  virtual std::string_view config_name() const = 0;
  // Every tensor name, sorted.
  virtual std::vector<std::string> TensorNames() const = 0;
  virtual bool Contains(const std::string& name) const = 0;
  // Row-major shape of `name`; NotFound naming the checkpoint and the tensor.
  virtual Result<std::vector<int64_t>> Shape(const std::string& name) const = 0;
  // The values of `name` as f32 (out.size() == its element count); errors name the file and the
  // tensor.
  virtual Status ReadF32(const std::string& name, std::span<float> out) const = 0;
  // The quantized dtype (q8_0, q4_0, a k-quant) the file stores `name` in, or nullopt for a plain
  // float type or an unknown name. Default: nullopt (a format without quantized tensors).
  virtual std::optional<DType> StoredQuantizedDType(const std::string& name) const;
  // Whether the file stores `name` in quantized blocks of any type, including types with no
  // runtime dtype. Default: false.
  virtual bool StoredQuantized(const std::string& name) const;
  // The stored blocks of `name` byte for byte, in StoredQuantizedDType(name) (out.size() == their
  // bytes). Default: Unimplemented.
  virtual Status ReadBlocks(const std::string& name, std::span<uint8_t> out) const;
};

// The model `hf` describes, its weights read from `source` by HfTensorName, with every check
// LoadHfModel makes (missing, unexpected and wrongly shaped tensors are errors naming them).
Result<LoadedModel> LoadModelFromSource(Backend& backend, HfModelConfig hf,
                                        const HfTensorSource& source, const LoadOptions& options);

Result<LoadedModel> LoadHfModel(Backend& backend, const std::string& dir,
                                const LoadOptions& options = {});

}  // namespace sy
