// ModelConfig: the architecture of a decoder-only MoE transformer, as plain fields.
//
// One struct covers the Mixtral, Qwen2-MoE / Qwen3-MoE, OLMoE, DeepSeek-MoE (v1) and GLM-4.5
// families. Field
// names follow the keys of Hugging Face's config.json where one exists, so a loader maps them one
// to one; where the families disagree the comment on the field says how each one maps.
//
// Layer kinds. Decoder layer l has an MoE FFN when num_experts > 0, l >= first_k_dense and
// (l - first_k_dense) % moe_every == 0; every other layer has a dense SwiGLU FFN of
// intermediate_size. (DeepSeek: first_k_dense = first_k_dense_replace, moe_every =
// moe_layer_freq = 1. Qwen2-MoE's decoder_sparse_step = s: first_k_dense = s - 1, moe_every = s.)
// "MoE layer m" below counts only the MoE layers, from 0.
//
// Pre-gate (Pre-gated MoE, ISCA'24, section IV-B). With pregate = true the experts of MoE layer
// m + 1 are chosen by a pre-gate that sits in MoE layer m and reads MoE layer m's input. MoE layer
// 0 keeps its own gate as well; the last MoE layer has no pre-gate; MoE layers m >= 1 have no gate
// of their own. See runtime/model/pregate_init.h for turning a conventional checkpoint into a
// pre-gated one.
//
// Ownership: a value type. Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/status.h"

namespace sy {

// How the router turns logits into expert scores (runtime/model/router.h).
enum class RouterScoring : uint8_t {
  kSoftmax,  // softmax over the experts (Mixtral, Qwen, OLMoE, DeepSeek-MoE v1)
  kSigmoid,  // sigmoid per expert, chosen after a correction bias (GLM-4.5, DeepSeek-V3)
};

struct ModelConfig {
  // ---- sizes ----
  int64_t vocab_size = 0;   // Default: 0, must be set (> 0)
  int64_t hidden_size = 0;  // Default: 0, must be set (> 0)
  int num_layers = 0;       // Default: 0, must be set (> 0). HF: num_hidden_layers
  int num_heads = 0;        // Default: 0, must be set (> 0). HF: num_attention_heads
  int num_kv_heads = 0;     // Default: 0 = num_heads (no GQA). HF: num_key_value_heads
  int64_t head_dim = 0;     // Default: 0 = hidden_size / num_heads. Must be even (RoPE)
  // Dense FFN width, used by the layers that are not MoE layers. Default: 0 (needed only when
  // some layer is dense).
  int64_t intermediate_size = 0;

  // ---- mixture of experts ----
  int num_experts = 0;                // Default: 0 = no MoE layer. HF: num_local_experts (Mixtral),
                                      // num_experts (Qwen, OLMoE), n_routed_experts (DeepSeek)
  int64_t moe_intermediate_size = 0;  // Default: 0, must be set when num_experts > 0. Mixtral:
                                      // intermediate_size
  int top_k = 2;                      // Default: 2. HF: num_experts_per_tok
  // Renormalise the top-k probabilities to sum to 1. Default: true (Mixtral). Qwen2/3-MoE and
  // OLMoE read it from config.json; DeepSeek-MoE v1 uses false.
  bool norm_topk_prob = true;
  // Shared experts, always active. They run as one SwiGLU MLP of width
  // num_shared_experts * shared_expert_intermediate_size, exactly as DeepSeek fuses them.
  // Default: 0. HF: n_shared_experts (DeepSeek); Qwen2-MoE has 1.
  int num_shared_experts = 0;
  int64_t shared_expert_intermediate_size = 0;  // Default: 0 = moe_intermediate_size
  // Qwen2-MoE: the shared output is scaled by sigmoid(h . w) per token. Default: false.
  bool shared_expert_gate = false;
  int first_k_dense = 0;  // Default: 0. Dense layers before the first MoE layer
  int moe_every = 1;      // Default: 1. An MoE layer every moe_every layers after those
  // Per-expert capacity ceil(capacity_factor * tokens * top_k / num_experts); token-slots past it
  // are dropped in token order. Default: 0 = dropless.
  double capacity_factor = 0.0;
  // Load-balancing loss coefficient (Switch form, summed over MoE layers). Default: 0.01.
  double router_aux_loss_coef = 0.01;
  // Router z-loss coefficient (mean over tokens of logsumexp(router logits)^2, summed over MoE
  // layers). Default: 0.
  double router_z_loss_coef = 0.0;
  // Pre-gated MoE wiring (see the comment at the top). Default: false.
  bool pregate = false;
  // ---- sigmoid routing (GLM-4.5, DeepSeek-V3: HF scoring_func "sigmoid", topk_method
  // "noaux_tc") ----
  // Default: kSoftmax. kSigmoid scores each expert sigmoid(logit), chooses the top-k of
  // score + layers/{L}/moe/expert_bias (HF e_score_correction_bias) within the best
  // topk_groups of num_expert_groups groups, and weights the chosen experts by their scores
  // (renormalised with norm_topk_prob) times routed_scaling_factor. Inference only for now.
  RouterScoring router_scoring = RouterScoring::kSoftmax;
  int num_expert_groups = 1;           // Default: 1. HF: n_group
  int topk_groups = 1;                 // Default: 1. HF: topk_group
  double routed_scaling_factor = 1.0;  // Default: 1

  // ---- attention, norms, embeddings ----
  double rope_theta = 10000.0;  // Default: 10000 (Mixtral 1e6, Qwen2-MoE 1e6)
  // RoPE rotates the first rotary_dim values of each head; the rest pass through. Default: 0 =
  // the whole head. GLM-4.5: head_dim * partial_rotary_factor.
  int64_t rotary_dim = 0;
  double rms_norm_eps = 1e-6;  // Default: 1e-6 (Mixtral 1e-5)
  // RMSNorm on queries and keys after the projection, before RoPE. Default: false. Qwen3-MoE and
  // OLMoE use true.
  bool qk_norm = false;
  // With qk_norm: true normalises each head over head_dim (Qwen3-MoE); false normalises the whole
  // projection over heads * head_dim (OLMoE). Default: true.
  bool qk_norm_per_head = true;
  bool attention_bias = false;  // Default: false. Bias on q, k, v projections (Qwen2-MoE)
  // Bias on the output projection o. Default: false. Hugging Face's attention_bias = true for
  // Qwen3-MoE, OLMoE and DeepSeek-MoE puts a bias on q, k, v and o (both fields true);
  // Qwen2-MoE's bias is on q, k, v only.
  bool attention_out_bias = false;
  bool tie_word_embeddings = false;  // Default: false. The LM head reads embed_tokens

  // ---- training ----
  // Recompute each layer's activations in the backward instead of keeping them. Default: false.
  bool recompute = false;

  // Returns OK, or InvalidArgument naming the first bad field and how to fix it.
  Status Validate() const;

  // Derived values (call on a validated config).
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  int64_t dim_per_head() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  int64_t shared_intermediate() const {
    return static_cast<int64_t>(num_shared_experts) * (shared_expert_intermediate_size > 0
                                                           ? shared_expert_intermediate_size
                                                           : moe_intermediate_size);
  }
  bool IsMoeLayer(int layer) const;
  // The MoE index of decoder layer `layer`, or -1 when it is dense.
  int MoeIndex(int layer) const;
  int NumMoeLayers() const;
  // Whether MoE layer m computes its own routing (a gate) or receives it from a pre-gate.
  bool MoeLayerHasGate(int moe_index) const { return !pregate || moe_index == 0; }
  // Whether MoE layer m holds a pre-gate for MoE layer m + 1.
  bool MoeLayerHasPregate(int moe_index) const { return pregate && moe_index + 1 < NumMoeLayers(); }

  // Parameters of the whole model, the routed experts included (on a validated config).
  int64_t NumParameters() const;
  // The routed experts' parameters alone.
  int64_t NumExpertParameters() const;

  // One line for people: "2 layers (2 MoE), 4 experts (top-2), hidden 64, 0.3 M parameters".
  std::string Summary() const;
  // Every field on one line, for logs and --verbose: "vocab=... hidden=64 layers=4 ...".
  std::string ToString() const;
};

}  // namespace sy
