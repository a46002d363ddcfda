// MoeModel: the decoder-only MoE transformer. It takes tokens to logits and loss, and has an
// explicit backward into every parameter's gradient (llm.c style).
//
//   x_0 = embed_tokens[tokens]
//   x_{l+1} = DecoderLayer_l(x_l)                    (runtime/model/decoder_layer.h)
//   logits = RmsNorm_final(x_L) W_head^T             (W_head = embed_tokens when tied)
//   loss = mean CE over targets != -1
//        + router_aux_loss_coef * sum over MoE layers of aux
//        + router_z_loss_coef   * sum over MoE layers of z
// The aux and z definitions are in runtime/model/router.h. Pre-gated wiring (config.pregate):
// MoE layer m >= 1 is routed by the logits MoE layer m-1's pre-gate computed from MoE layer
// m-1's input. Its aux and z losses are taken on those logits, and their gradient flows into that
// pre-gate.
//
// Usage (training):
//   SY_ASSIGN_OR_RETURN(auto model, MoeModel::Create(backend, config));
//   SY_RETURN_IF_ERROR(model->InitializeParameters(seed));     // or load into parameters()
//   model->ZeroGrads();
//   SY_ASSIGN_OR_RETURN(LossReport r, model->Forward(tokens, targets));
//   SY_RETURN_IF_ERROR(model->Backward());                      // grads accumulate
//   for (Parameter& p : model->parameters()) optimizer.Step(p.name, p.value, p.grad);
//
// Forward-only use (inference, evaluation): ModelOptions{.with_grad = false} allocates no
// gradients and releases each layer's activations as soon as the next layer has its input; the
// weights may then be bf16 or f16 (ModelOptions::weight_dtype), and the routed experts and the
// dense matrices quantized (expert_weight_dtype, matrix_dtypes). Forward attends over the batch's
// own keys and values; ForwardCached is the same layers in incremental mode, over a KV cache
// (prefill and decode; inference/kv_cache_decoder.h drives it).
//
// Note [mixed precision]. ModelOptions::compute_dtype bf16 or f16 trains as torch.autocast does
// with an f32 residual stream (Megatron's fp32_residual_connection):
//   - weights (matrices, embeddings, norms) are held in the compute dtype (weight_dtype): the
//     compute copy, which the optimizer rewrites from f32 master weights it keeps elsewhere
//     (launcher/training/param_state.h); biases stay f32;
//   - the residual stream x_l and its gradient are f32; each branch (attention, FFN) takes its
//     input normalised into the compute dtype and computes in it: q, k, v, the attention output,
//     the experts' rows and their SwiGLU, the gradients inside the branch; the branch's last GEMM
//     (wo, w_down, the experts' combine) accumulates into the f32 stream;
//   - the router's logits and probabilities, the LM head's logits, the loss, the norms' and the
//     softmaxes' statistics, and every parameter gradient are f32; gradients that sum several
//     products (dW, the input gradient of a branch) accumulate in f32 (Note [16-bit operands] in
//     runtime/backend/backend.h);
//   - the backward rounds the f32 residual gradient to the compute dtype once per branch, and the
//     LM head's gradient dlogits is written in it.
// Incremental decoding (ForwardCached) computes in f32 only.
//
// Layer hooks (runtime/model/layer_hooks.h): with set_layer_hooks, Forward and Backward call the
// hooks around the embedding, every decoder layer and the head (ZeRO-3 uses them to gather and free
// sharded parameters). Without hooks (the default) nothing changes.
//
// Embedding compute (runtime/model/embedding.h): set_embedding_compute replaces the lookup of
// tokens (the embedding partition of parallel/embedding_partition.h). Without one (the default)
// the model's own Embedding runs.
//
// Ownership: the model owns its layers and ParameterStore; everything lives on `backend`, which
// must outlive the model. Tensors returned by accessors are views valid until the next Forward or
// ReleaseActivations. Thread-safety: one thread at a time (the thread that drives the backend's
// compute stream).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/check.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/attention_block.h"
#include "runtime/model/decoder_layer.h"
#include "runtime/model/embedding.h"
#include "runtime/model/expert_compute.h"
#include "runtime/model/layer_hooks.h"
#include "runtime/model/linear.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_store.h"
#include "runtime/model/rms_norm_layer.h"

namespace sy {

struct ModelOptions {
  // Storage dtype of weight matrices, embeddings and norm weights (biases are always f32).
  // Default: f32. bf16/f16 with with_grad need compute_dtype equal to it: the weights are then
  // the compute copy of mixed-precision training (Note [mixed precision]).
  DType weight_dtype = DType::kF32;
  // The dtype of the activations inside each layer's branches (Note [mixed precision]): f32, bf16
  // or f16. Default: f32.
  DType compute_dtype = DType::kF32;
  // Allocate gradients and keep activations for Backward. Default: true.
  bool with_grad = true;
  // Allocate and register the routed experts of every MoE layer. false (forward-only): the model
  // holds no routed-expert parameters and its MoE layers compute through AbsentExpertCompute,
  // which fails until an expert provider (inference/expert_provider.h) brings the experts from
  // elsewhere (a loader that kept them on the host, inference/model_loader.h). Default: true.
  bool routed_experts = true;
  // Storage dtype of single dense matrices, by parameter name (runtime/model/dense_matrices.h):
  // the attention projections, the dense and shared-expert FFNs and the untied LM head, which only
  // Linear::Forward reads (Backend::Gemm with trans_b). Besides f32, bf16 and f16, a forward-only
  // model may hold them quantized (q8_0, q4_0, a k-quant) when their rows are whole blocks
  // and the backend takes quantized weights (Backend::caps().quantized_weights: cpu and sim, not
  // cuda). A matrix not named here, the routers, the embeddings and the norms stay in weight_dtype.
  // InvalidArgument naming the entry for any other name. Default: empty.
  std::map<std::string, DType> matrix_dtypes = {};
  // Storage dtype of the routed experts' weights; unset: weight_dtype. Besides f32, bf16 and f16,
  // a forward-only model may hold them quantized (q8_0, q4_0 or a k-quant: runtime/core/dtype.h),
  // when hidden_size and moe_intermediate_size are whole blocks; attention, the routers, the norms,
  // the embeddings and the LM head stay in weight_dtype (or matrix_dtypes). Quantized experts
  // need a backend that takes quantized weights (cpu, sim). Default: unset.
  std::optional<DType> expert_weight_dtype = std::nullopt;
  // The routed experts' dtypes of single MoE layers, by decoder layer index, where they differ from
  // expert_dtype() (a Q4_K_M GGUF holds the gate and up projections in Q4_K and some layers' down
  // projections in Q6_K, others in Q4_K): each matrix as expert_weight_dtype allows, forward-only.
  // InvalidArgument naming the layer for a layer that is not an MoE layer. Default: empty.
  std::map<int, ExpertMatrixDTypes> expert_layer_dtypes = {};
  // The routed experts have no weights in the model: each MoE layer computes through a bound
  // LocalExpertCompute (Note [bound experts] in runtime/model/expert_compute.h) whose weights a
  // source gives per Forward; their parameters are not registered. Training on the expert store
  // uses it (launcher/training/expert_working_set.h). Default: false.
  bool bound_experts = false;
  // Every parameter's value and gradient comes from Backend::AllocateReleasable, so ZeRO-3
  // (parallel/zero3.h) can drop the dense ones' memory between uses on a GPU (on cpu every
  // allocation already can). Default: false.
  bool releasable_parameters = false;
  // The dtype the routed experts are stored in, but for the layers of expert_layer_dtypes.
  DType expert_dtype() const { return expert_weight_dtype.value_or(weight_dtype); }
  // The dtypes of decoder layer `layer`'s routed experts.
  ExpertMatrixDTypes expert_dtypes(int layer) const {
    const auto it = expert_layer_dtypes.find(layer);
    return it != expert_layer_dtypes.end() ? it->second : ExpertMatrixDTypes::All(expert_dtype());
  }
};

struct LossReport {
  float loss = 0.0f;        // ce_loss + aux_coef * aux_loss + z_coef * z_loss
  float ce_loss = 0.0f;     // mean cross-entropy over targets != -1 (0 when there are none)
  float aux_loss = 0.0f;    // sum over MoE layers of aux, without its coefficient
  float z_loss = 0.0f;      // sum over MoE layers of z, without its coefficient
  int64_t num_targets = 0;  // targets != -1
  std::vector<float> aux_per_moe_layer;
  std::vector<float> z_per_moe_layer;
};

class MoeModel {
 public:
  // Validates the config (InvalidArgument naming the field) and allocates every parameter;
  // ResourceExhausted when the backend runs out of memory.
  static Result<std::unique_ptr<MoeModel>> Create(Backend& backend, const ModelConfig& config,
                                                  const ModelOptions& options = {});

  // Fills every parameter: weight matrices and embeddings ~ N(0, stddev^2), norm weights 1,
  // biases 0. A parameter's values depend only on (seed, its name), not on what else exists.
  Status InitializeParameters(uint64_t seed, float stddev = 0.02f);

  // tokens i32 [B, T] in [0, vocab); targets i32 [B, T] in [-1, vocab), -1 = ignored, or an
  // undefined Tensor for logits only (the report then has loss terms from the router only).
  // Both may be in host memory or on the backend. InvalidArgument for out-of-range ids.
  Result<LossReport> Forward(const Tensor& tokens, const Tensor& targets);
  // As Forward, with a loss weight per row (B entries, host memory): the cross-entropy is then
  // sum over rows b and scored positions of row_weights[b] * CE, not the mean, and Backward takes
  // its gradient. report.ce_loss is that weighted sum. For losses whose normalisation spans more
  // than this batch (each task's mean over a step computed on several ranks).
  Result<LossReport> Forward(const Tensor& tokens, const Tensor& targets,
                             std::span<const float> row_weights);
  // f32 [B*T, vocab] on the backend, from the last Forward.
  const Tensor& logits() const { return logits_; }

  // The incremental mode: one forward step over a KV cache. `batch` describes the step's tokens
  // (rows x tokens per row) and their positions, and batch.kv_cache is the cache whose step it
  // is (KvCache::Begin called; the caller commits). ids i32 [N] on the backend; logits f32
  // [N, vocab] on the backend, overwritten. Each decoder layer runs its one Forward (attention
  // over the cache, the MoE or dense FFN) and is released at once; with a Workspace bound
  // (runtime/backend/workspace.h) each layer's activations are given back after it, so the step
  // needs the memory of one layer, not of all. Keeps nothing for Backward; router stats are not
  // reported.
  Status ForwardCached(const Tensor& ids, const TokenBatch& batch, const Tensor& logits);

  // Gradient of the last Forward's loss; adds into every parameter's grad. Needs targets and
  // with_grad. FailedPrecondition otherwise.
  Status Backward();
  // A factor on the gradient of every MoE layer's aux and z terms, from the next Forward on (the
  // reported losses are unscaled): a micro-batch's share of a step's router losses, times a loss
  // scale (Router::set_loss_scale). Default: 1.
  void set_router_loss_scale(float scale);
  void ZeroGrads() { params_.ZeroGrads(backend_); }
  // Drops every saved activation (Backward is then unavailable until the next Forward).
  void ReleaseActivations();

  // Recompute layer `layer`'s activations in the backward instead of keeping them. The default
  // is config().recompute for every layer.
  void SetRecompute(int layer, bool recompute) { layers_.at(layer)->set_recompute(recompute); }

  ParameterStore& parameters() { return params_; }
  const ParameterStore& parameters() const { return params_; }
  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  Backend& backend() { return backend_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  DecoderLayer& layer(int l) { return *layers_.at(l); }
  // The MoE layer with MoE index m (see ModelConfig::MoeIndex).
  MoeLayer& moe_layer(int m);

  // Hooks called around each unit of Forward and Backward (null: none, the default). Not owned.
  void set_layer_hooks(LayerHooks* hooks) { hooks_ = hooks; }
  // Units as runtime/model/layer_hooks.h numbers them: embedding, decoder layers, head.
  int num_units() const { return num_layers() + 2; }
  // The unit whose Forward/Backward reads `p` (the LM head's unit for a tied embedding table is
  // the embedding's: unit 0).
  int UnitOf(const Parameter& p) const;

  // Replaces the embedding lookup and returns the one it replaces (the model's own Embedding the
  // first time). The "embed_tokens" parameter stays registered; the replacement decides what it
  // holds. With tied embeddings the LM head keeps reading the table the model created.
  std::unique_ptr<EmbeddingCompute> set_embedding_compute(
      std::unique_ptr<EmbeddingCompute> embedding) {
    SY_CHECK(embedding != nullptr) << "set_embedding_compute(nullptr)";
    std::swap(embedding_, embedding);
    return embedding;
  }

 private:
  MoeModel(Backend& backend, const ModelConfig& config, const ModelOptions& options)
      : backend_(backend), config_(config), options_(options) {}
  Status Build();
  // The hook calls; OK when no hooks are set.
  Status HookBeforeForward(int unit) { return hooks_ ? hooks_->BeforeForward(unit) : Status::Ok(); }
  Status HookAfterForward(int unit) { return hooks_ ? hooks_->AfterForward(unit) : Status::Ok(); }
  Status HookBeforeBackward(int unit) {
    return hooks_ ? hooks_->BeforeBackward(unit) : Status::Ok();
  }
  Status HookAfterBackward(int unit) { return hooks_ ? hooks_->AfterBackward(unit) : Status::Ok(); }

  Backend& backend_;
  ModelConfig config_;
  ModelOptions options_;
  ParameterStore params_;
  std::unique_ptr<EmbeddingCompute> embedding_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  std::vector<int> moe_layer_ids_;  // decoder layer of each MoE index
  RmsNormLayer final_norm_;
  Linear lm_head_;
  LayerHooks* hooks_ = nullptr;  // not owned

  // Activations of the last Forward.
  TokenBatch batch_;
  std::vector<Tensor> residual_;       // x_0 .. x_L
  std::vector<Tensor> routed_logits_;  // per MoE index: the pre-gate logits routing it
  Tensor stats_;                       // [1 + 2M]: CE sum, then {aux, z} per MoE layer
  Tensor final_hidden_, logits_, targets_, ce_lse_;
  int64_t num_targets_ = 0;
  std::vector<float> token_loss_weights_;  // per token, from Forward's row weights; empty = mean
};

// The routed experts' storage dtypes as a log line says them: "q4_k", or, when the layers differ
// (ModelOptions::expert_layer_dtypes), how many expert matrices (one per MoE layer and kind) each
// holds: "q4_k x30, q6_k x6".
std::string DescribeExpertDTypes(const MoeModel& model);

}  // namespace sy
