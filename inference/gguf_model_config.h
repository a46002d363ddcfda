// GGUF model metadata: the {arch}.* keys llama.cpp's convert_hf_to_gguf.py writes for each MoE
// family, to and from the HfModelConfig Switchyard runs (the tensor names are in gguf_model.h).
//
// Metadata ({arch} = the architecture): {arch}.block_count, context_length, embedding_length,
// feed_forward_length (the dense width; Mixtral's expert width), expert_feed_forward_length,
// expert_shared_feed_forward_length (Qwen2-MoE), expert_count, expert_used_count,
// expert_shared_count and leading_dense_block_count (DeepSeek), expert_weights_norm (top-k
// renormalisation; when absent, the arch's llama.cpp default: true for llama and qwen3moe),
// attention.head_count(_kv), attention.key_length / value_length (head_dim),
// attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count, vocab_size. Which
// layers are MoE is read from the tensors (a layer with ffn_gate_inp is one), so Qwen's
// decoder_sparse_step and DeepSeek's first_k_dense_replace both survive. Settings Switchyard does
// not implement (rope scaling, a sliding window, sigmoid gating or an expert weight scale other
// than 1 outside glm4moe) are Unimplemented errors naming the key; a tensor with no counterpart is
// an error naming it.
//
// glm4moe (GLM-4.5): rope.dimension_count is the partial rotary dim, expert_gating_func 2
// (sigmoid), expert_weights_scale the routed scaling factor, expert_group_count /
// expert_group_used_count the group limit, and block_count counts nextn_predict_layers
// multi-token-prediction blocks after the decoder's.
//
// Thread-safety: pure functions. ParseGgufModelConfig reads untrusted metadata: every value is
// checked (fuzz/formats/gguf_fuzzer.cc runs it on every header it parses).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "inference/hf_config.h"
#include "runtime/core/status.h"
#include "storage/formats/gguf.h"

namespace sy {

// Marks an output.weight that is a copy of token_embd.weight, written because llama.cpp's arch
// requires output.weight for a model whose embeddings are tied. llama.cpp ignores the key;
// Switchyard reads the model as tied again.
inline constexpr std::string_view kGgufTiedOutputKey = "switchyard.tie_word_embeddings";

// "llama", "qwen2moe", "qwen3moe", "olmoe", "deepseek", "glm4moe".
std::string_view GgufArchitecture(HfFamily family);
// Whether Switchyard reads and writes GGUF files of `family`.
bool GgufSupportsFamily(HfFamily family);
// Whether llama.cpp's converter permutes q/k rows for the family (interleaved RoPE).
bool GgufPermutesQK(HfFamily family);

// The metadata a GGUF of this model carries (general.* and {arch}.*, no tokenizer), in the order
// it is written. `name` goes into general.name.
std::vector<storage::GgufKeyValue> GgufModelMetadata(const HfModelConfig& hf,
                                                     const std::string& name);
// The model config that GGUF metadata and tensor infos describe; errors name `file` and the key.
Result<HfModelConfig> ParseGgufModelConfig(const storage::GgufHeader& header,
                                           const std::string& file);

}  // namespace sy
