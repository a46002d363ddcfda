// GGUF models: the mapping between llama.cpp's GGUF names and metadata and the Hugging Face
// checkpoints Switchyard loads, in both directions, and `generate --model x.gguf`.
//
// Architectures (general.architecture), as llama.cpp's convert_hf_to_gguf.py writes them:
//   family        arch       RoPE in llama.cpp   q/k rows
//   Mixtral       llama      interleaved (NORM)  permuted
//   Qwen2-MoE     qwen2moe   halves (NEOX)       as in HF
//   Qwen3-MoE     qwen3moe   halves (NEOX)       as in HF
//   OLMoE         olmoe      halves (NEOX)       as in HF
//   DeepSeek-MoE  deepseek   interleaved (NORM)  permuted
//   GLM-4.5       glm4moe    halves (NEOX)       as in HF
// Hugging Face's RoPE (and ours) rotates pairs (i, i + d/2) of each head; llama.cpp's NORM mode
// rotates pairs (2i, 2i + 1). convert_hf_to_gguf.py therefore permutes the rows of q_proj and
// k_proj (weights and biases) for `llama` and `deepseek`: within each head of d rows, HF row
// j * d/2 + i goes to GGUF row 2i + j (reshape(n_head, 2, d/2, ...).swapaxes(1, 2)), with n_head
// the query heads for q and the key/value heads for k. Reading undoes it; writing applies it.
//
// Tensor names (blk.L. prefix inside layer L):
//   model.embed_tokens.weight          token_embd.weight
//   model.norm.weight                  output_norm.weight
//   lm_head.weight                     output.weight (absent when tied, except for olmoe, whose
//                                      llama.cpp loader requires it: there a tied model gets the
//                                      embedding again, marked switchyard.tie_word_embeddings =
//                                      true, and reads back tied)
//   input_layernorm.weight             attn_norm.weight
//   post_attention_layernorm.weight    ffn_norm.weight (glm4moe: post_attention_norm.weight)
//   self_attn.{q,k,v}_proj.{weight,bias}  attn_{q,k,v}.{weight,bias}
//   self_attn.o_proj.{weight,bias}     attn_output.{weight,bias}
//   self_attn.{q,k}_norm.weight        attn_{q,k}_norm.weight
//   mlp.{gate,up,down}_proj.weight     ffn_{gate,up,down}.weight (dense layers)
//   mlp.gate.weight (Mixtral: block_sparse_moe.gate.weight)  ffn_gate_inp.weight (the router)
//   mlp.experts.E.{gate,up,down}_proj.weight (Mixtral: block_sparse_moe.experts.E.{w1,w3,w2})
//                                      ffn_{gate,up,down}_exps.weight, expert E of a 3-D stack:
//                                      ne = {in, out, n_experts}
//   mlp.shared_expert.* (Qwen2-MoE), mlp.shared_experts.* (DeepSeek)  ffn_{gate,up,down}_shexp
//   mlp.shared_expert_gate.weight      ffn_gate_inp_shexp.weight
//   mlp.gate.e_score_correction_bias   exp_probs_b.bias (glm4moe)
// glm4moe's multi-token-prediction blocks (after the decoder's; nextn_predict_layers) are skipped.
// Shapes: a row-major HF [out, in] tensor is GGUF ne {in, out}.
//
// Metadata: inference/gguf_model_config.h.
//
// Ownership: GgufCheckpoint owns its mapped file. Thread-safety: a GgufCheckpoint is immutable
// after Open; the free functions are pure apart from the files they write.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inference/gguf_model_config.h"
#include "inference/hf_config.h"
#include "inference/model_loader.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "storage/formats/gguf.h"

namespace sy {

// A GGUF file seen as a Hugging Face checkpoint: tensor names, shapes and values as the HF
// checkpoint it was converted from has them (experts unstacked, q/k rows unpermuted).
class GgufCheckpoint : public HfTensorSource {
 public:
  // Opens and validates the file, its config and its tensor names.
  static Result<std::unique_ptr<GgufCheckpoint>> Open(const std::string& path);

  const HfModelConfig& config() const { return config_; }
  const storage::GgufFile& file() const { return *file_; }

  const std::string& where() const override { return file_->path(); }
  std::string_view config_name() const override { return "the GGUF metadata"; }
  std::vector<std::string> TensorNames() const override;
  bool Contains(const std::string& name) const override;
  Result<std::vector<int64_t>> Shape(const std::string& name) const override;
  // Dequantized (F32, F16, BF16, F64, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) and unpermuted.
  Status ReadF32(const std::string& name, std::span<float> out) const override;
  // The GGUF tensor type the values of `name` are stored in.
  Result<storage::GgmlType> Type(const std::string& name) const;
  // The bytes of `name` in its stored type, rows unpermuted: F32, F16 and BF16 (what an HF export
  // writes) and the blocks of Q8_0, Q4_0, Q4_K, Q5_K and Q6_K; InvalidArgument naming the tensor
  // for any other type (use ReadF32).
  Result<std::vector<uint8_t>> ReadRaw(const std::string& name) const;
  // Q8_0, Q4_0, Q4_K, Q5_K and Q6_K tensors as the runtime's dtypes of those names (ReadRaw's
  // bytes).
  std::optional<DType> StoredQuantizedDType(const std::string& name) const override;
  bool StoredQuantized(const std::string& name) const override;
  Status ReadBlocks(const std::string& name, std::span<uint8_t> out) const override;

  struct Entry {
    const storage::GgufTensorInfo* tensor = nullptr;
    int expert = -1;             // the slice of a stacked expert tensor, or -1
    int permute_heads = 0;       // > 0: q/k rows interleaved over this many heads
    std::vector<int64_t> shape;  // row-major, as HF has it
  };
  // Where the values of HF tensor `name` lie in the file (owned by this checkpoint); NotFound
  // naming the file and the tensor.
  Result<const Entry*> Find(const std::string& name) const;

 private:
  GgufCheckpoint() = default;
  std::span<const uint8_t> Bytes(const Entry& e) const;

  std::unique_ptr<storage::GgufFile> file_;
  HfModelConfig config_;
  std::vector<std::pair<std::string, Entry>> entries_;  // sorted by name
};

// One Hugging Face tensor to export: its name, type (F32, F16 or BF16) and row-major shape, and
// its bytes (borrowed for the call).
struct HfTensorView {
  std::string name;
  storage::GgmlType type = storage::GgmlType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};

struct GgufExportOptions {
  // Storage type of the weights: unset keeps each tensor's type (F32, F16, BF16: bit-exact);
  // F32, F16 or BF16 converts; Q8_0 or Q4_0 quantizes every matrix whose rows are a multiple of
  // 32 values, keeping vectors, the routers and the shared-expert gate in F32 as llama.cpp's
  // converter does. Default: unset.
  std::optional<storage::GgmlType> type;
  // general.name. Default: "switchyard".
  std::string name = "switchyard";
  // Extra metadata appended after the model's (tokenizer.ggml.*). Default: none.
  std::vector<storage::GgufKeyValue> extra_metadata;
  // Default: true. false: never replace a file at the path, even one that appears while writing
  // (AlreadyExists; `convert`).
  bool replace_existing = true;
};

// Writes `tensors` (every tensor of the model, HF names) as a GGUF at `path` (temporary name, then
// rename). Errors name the tensor: one missing or unknown, an expert missing from a stack, a
// shape that disagrees with the config.
Status WriteGgufFromHf(const HfModelConfig& hf, std::span<const HfTensorView> tensors,
                       const std::string& path, const GgufExportOptions& options = {});

// A Hugging Face model directory (config.json + safetensors) -> GGUF at `path`.
Status ExportHfDirToGguf(const std::string& hf_dir, const std::string& path,
                         const GgufExportOptions& options = {});

// The forward-only model of a GGUF file (LoadModelFromSource over a GgufCheckpoint).
Result<LoadedModel> LoadGgufModel(Backend& backend, const std::string& path,
                                  const LoadOptions& options = {});

// Whether `path` names a GGUF file (a regular file whose first four bytes are "GGUF").
bool IsGgufPath(const std::string& path);

}  // namespace sy
