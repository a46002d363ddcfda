#include "runtime/model/moe_model.h"

#include <map>
#include <string>
#include <string_view>

#include "runtime/backend/workspace.h"
#include "runtime/core/check.h"
#include "runtime/model/dense_matrices.h"
#include "runtime/model/host_transfer.h"
#include "runtime/model/kv_cache.h"

namespace sy {
namespace {

// The int32 contents of a [B, T] token tensor in host or backend memory.
Result<std::vector<int32_t>> ReadIds(Backend& backend, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kI32 || t.rank() != 2) {
    return InvalidArgumentError(std::string(what) + " must be i32 [batch, seq_len], got " +
                                t.ToString());
  }
  if (t.device().is_host()) {
    const int32_t* p = t.data<int32_t>();
    return std::vector<int32_t>(p, p + t.numel());
  }
  return DownloadI32(backend, t);
}

// A routed-expert storage dtype other than weight_dtype (ModelOptions::expert_weight_dtype and
// expert_layer_dtypes): `what` names the option in the error.
Status CheckExpertDType(const Backend& backend, const ModelConfig& config,
                        const ModelOptions& options, DType e, const std::string& what) {
  const bool plain = e == DType::kF32 || e == DType::kBF16 || e == DType::kF16;
  if (!plain && !IsQuantized(e)) {
    return InvalidArgumentError(
        "model options: " + what + " " + std::string(DTypeName(e)) +
        " must be f32, bf16, f16, q8_0, q4_0, q2_k, q3_k, q4_k, q5_k or q6_k");
  }
  if (IsQuantized(e) && !backend.caps().quantized_weights) {
    return InvalidArgumentError("model options: " + what + " " + std::string(DTypeName(e)) +
                                ": the " + backend.name() +
                                " backend has no kernels for quantized weights; keep the "
                                "experts in a float dtype, or run on the cpu device");
  }
  if (options.with_grad) {
    return InvalidArgumentError("model options: " + what + " " + std::string(DTypeName(e)) +
                                " differs from weight_dtype " +
                                std::string(DTypeName(options.weight_dtype)) +
                                ", which training needs; set with_grad = false");
  }
  const int64_t block = DTypeBlockSize(e);
  if (config.hidden_size % block != 0 || config.moe_intermediate_size % block != 0) {
    return InvalidArgumentError(
        "model options: experts in " + std::string(DTypeName(e)) + " (" + what +
        ") need hidden_size (" + std::to_string(config.hidden_size) +
        ") and moe_intermediate_size (" + std::to_string(config.moe_intermediate_size) +
        ") to be multiples of " + std::to_string(block) + "; keep the experts in " +
        std::string(DTypeName(options.weight_dtype)) + " or pick q8_0 / q4_0 (blocks of 32)");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<MoeModel>> MoeModel::Create(Backend& backend, const ModelConfig& config,
                                                   const ModelOptions& options) {
  SY_RETURN_IF_ERROR(config.Validate());
  const auto plain_float = [](DType d) {
    return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
  };
  if (!plain_float(options.weight_dtype)) {
    return InvalidArgumentError("model options: weight_dtype must be f32, bf16 or f16");
  }
  if (!plain_float(options.compute_dtype)) {
    return InvalidArgumentError("model options: compute_dtype must be f32, bf16 or f16");
  }
  if (options.compute_dtype != DType::kF32 && !backend.caps().sixteen_bit_activations) {
    return InvalidArgumentError("model options: compute_dtype " +
                                std::string(DTypeName(options.compute_dtype)) + ": the " +
                                backend.name() +
                                " backend's operators take f32 activations only; compute in f32 "
                                "there, or run on the cpu or sim device");
  }
  if (options.with_grad && options.weight_dtype != DType::kF32 &&
      options.weight_dtype != options.compute_dtype) {
    return InvalidArgumentError(
        "model options: weight_dtype " + std::string(DTypeName(options.weight_dtype)) +
        " with gradients is the compute copy of mixed-precision training and needs compute_dtype " +
        std::string(DTypeName(options.weight_dtype)) + " (it is " +
        std::string(DTypeName(options.compute_dtype)) + "); or set with_grad = false");
  }
  if (const DType e = options.expert_dtype(); e != options.weight_dtype) {
    SY_RETURN_IF_ERROR(CheckExpertDType(backend, config, options, e, "expert_weight_dtype"));
  }
  for (const auto& [layer, dtypes] : options.expert_layer_dtypes) {
    const std::string what = "expert_layer_dtypes[" + std::to_string(layer) + "]";
    if (layer < 0 || layer >= config.num_layers || !config.IsMoeLayer(layer)) {
      return InvalidArgumentError("model options: " + what + ": layer " + std::to_string(layer) +
                                  " is not an MoE layer of this model");
    }
    for (const DType e : {dtypes.gate, dtypes.up, dtypes.down}) {
      if (e != options.weight_dtype)
        SY_RETURN_IF_ERROR(CheckExpertDType(backend, config, options, e, what));
    }
  }
  SY_RETURN_IF_ERROR(CheckMatrixDTypes(backend, config, options.matrix_dtypes, options.with_grad));
  if (options.with_grad && !options.routed_experts) {
    return InvalidArgumentError(
        "model options: routed_experts = false is forward-only; set with_grad = false");
  }
  std::unique_ptr<MoeModel> model(new MoeModel(backend, config, options));
  SY_RETURN_IF_ERROR(model->Build());
  return model;
}

Status MoeModel::Build() {
  const DType wd = options_.weight_dtype;
  const bool grad = options_.with_grad;
  params_.set_dtype_overrides(options_.matrix_dtypes);
  params_.set_releasable(options_.releasable_parameters);
  SY_ASSIGN_OR_RETURN(Embedding embedding, Embedding::Create(backend_, params_, config_.vocab_size,
                                                             config_.hidden_size, wd, grad));
  const Tensor table = embedding.table(), table_grad = embedding.table_grad();
  embedding_ = std::make_unique<Embedding>(std::move(embedding));
  ExpertComputeFactory experts;  // empty: LocalExpertCompute over every routed expert
  if (options_.expert_dtype() != wd || !options_.expert_layer_dtypes.empty()) {
    experts = [this](Backend& backend, ParameterStore& store, int layer, DType,
                     bool grad) -> Result<std::unique_ptr<ExpertCompute>> {
      SY_ASSIGN_OR_RETURN(
          auto local, LocalExpertCompute::Create(backend, store, layer, config_.num_experts,
                                                 config_.hidden_size, config_.moe_intermediate_size,
                                                 options_.expert_dtypes(layer), grad));
      return std::unique_ptr<ExpertCompute>(std::move(local));
    };
  }
  if (options_.bound_experts) {
    experts = [this](Backend&, ParameterStore&, int layer, DType,
                     bool) -> Result<std::unique_ptr<ExpertCompute>> {
      return std::unique_ptr<ExpertCompute>(
          LocalExpertCompute::CreateBound(layer, config_.num_experts));
    };
  }
  if (!options_.routed_experts) {
    experts = [](Backend&, ParameterStore&, int layer, DType,
                 bool) -> Result<std::unique_ptr<ExpertCompute>> {
      return std::unique_ptr<ExpertCompute>(std::make_unique<AbsentExpertCompute>(layer));
    };
  }
  for (int l = 0; l < config_.num_layers; ++l) {
    SY_ASSIGN_OR_RETURN(auto layer,
                        DecoderLayer::Create(backend_, params_, config_, l, wd, grad, experts));
    layer->set_compute_dtype(options_.compute_dtype);
    layers_.push_back(std::move(layer));
    if (config_.IsMoeLayer(l)) moe_layer_ids_.push_back(l);
  }
  SY_ASSIGN_OR_RETURN(final_norm_,
                      RmsNormLayer::Create(backend_, params_, "final_norm", config_.hidden_size, wd,
                                           grad, -1, static_cast<float>(config_.rms_norm_eps)));
  if (config_.tie_word_embeddings) {
    lm_head_ = Linear(table, table_grad, Tensor(), Tensor());
  } else {
    SY_ASSIGN_OR_RETURN(lm_head_,
                        Linear::Create(backend_, params_, "lm_head", "", config_.hidden_size,
                                       config_.vocab_size, wd, grad, -1));
  }
  return Status::Ok();
}

void MoeModel::set_router_loss_scale(float scale) {
  for (int m = 0; m < static_cast<int>(moe_layer_ids_.size()); ++m) {
    moe_layer(m).set_router_loss_scale(scale);
  }
}

MoeLayer& MoeModel::moe_layer(int m) {
  SY_CHECK(m >= 0 && m < static_cast<int>(moe_layer_ids_.size())) << "MoE index " << m;
  return *layers_[static_cast<size_t>(moe_layer_ids_[static_cast<size_t>(m)])]->moe();
}

int MoeModel::UnitOf(const Parameter& p) const {
  if (p.layer >= 0) return p.layer + 1;
  return p.name == "embed_tokens" ? 0 : num_units() - 1;
}

Status MoeModel::InitializeParameters(uint64_t seed, float stddev) {
  return params_.Initialize(backend_, seed, stddev);
}

Result<LossReport> MoeModel::Forward(const Tensor& tokens, const Tensor& targets) {
  return Forward(tokens, targets, {});
}

Result<LossReport> MoeModel::Forward(const Tensor& tokens, const Tensor& targets,
                                     std::span<const float> row_weights) {
  ReleaseActivations();
  SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadIds(backend_, tokens, "tokens"));
  const int64_t b = tokens.dim(0), t = tokens.dim(1), n = b * t;
  if (n == 0) return InvalidArgumentError("tokens: empty batch " + tokens.ToString());
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return InvalidArgumentError(
          "tokens: id " + std::to_string(id) +
          " outside [0, vocab_size = " + std::to_string(config_.vocab_size) + ")");
    }
  }
  std::vector<int32_t> target_ids;
  if (targets.defined()) {
    SY_ASSIGN_OR_RETURN(target_ids, ReadIds(backend_, targets, "targets"));
    if (targets.shape() != tokens.shape()) {
      return InvalidArgumentError("targets " + targets.ToString() + " must match tokens " +
                                  tokens.ToString());
    }
    num_targets_ = 0;
    for (int32_t id : target_ids) {
      if (id < -1 || id >= config_.vocab_size) {
        return InvalidArgumentError(
            "targets: id " + std::to_string(id) +
            " outside [-1, vocab_size = " + std::to_string(config_.vocab_size) + ")");
      }
      num_targets_ += id >= 0 ? 1 : 0;
    }
  }

  token_loss_weights_.clear();
  if (!row_weights.empty()) {
    if (static_cast<int64_t>(row_weights.size()) != b) {
      return InvalidArgumentError("row loss weights: " + std::to_string(row_weights.size()) +
                                  " for a batch of " + std::to_string(b) + " rows");
    }
    token_loss_weights_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      token_loss_weights_[static_cast<size_t>(i)] = row_weights[static_cast<size_t>(i / t)];
    }
  }
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i % t);
  batch_.batch = b;
  batch_.seq_len = t;
  SY_ASSIGN_OR_RETURN(batch_.positions, UploadI32(backend_, positions, Shape{n}));
  SY_ASSIGN_OR_RETURN(Tensor ids_dev, UploadI32(backend_, ids, Shape{n}));

  const int num_moe = static_cast<int>(moe_layer_ids_.size());
  SY_ASSIGN_OR_RETURN(stats_, Zeros(backend_, Shape{1 + 2 * num_moe}));
  routed_logits_.assign(static_cast<size_t>(num_moe), Tensor());
  const int64_t h = config_.hidden_size;
  residual_.assign(static_cast<size_t>(config_.num_layers) + 1, Tensor());
  SY_ASSIGN_OR_RETURN(residual_[0], backend_.Allocate(DType::kF32, Shape{n, h}));
  SY_RETURN_IF_ERROR(HookBeforeForward(0));
  SY_RETURN_IF_ERROR(embedding_->Forward(backend_, ids_dev, residual_[0]));
  SY_RETURN_IF_ERROR(HookAfterForward(0));

  for (int l = 0; l < config_.num_layers; ++l) {
    DecoderLayer& layer = *layers_[static_cast<size_t>(l)];
    const int m = config_.MoeIndex(l);
    Tensor routed, stats;
    if (m >= 0) {
      routed = routed_logits_[static_cast<size_t>(m)];
      stats = stats_.Slice(1 + 2 * m, 3 + 2 * m);
    }
    SY_ASSIGN_OR_RETURN(residual_[l + 1], backend_.Allocate(DType::kF32, Shape{n, h}));
    SY_RETURN_IF_ERROR(HookBeforeForward(l + 1));
    SY_RETURN_IF_ERROR(layer.Forward(backend_, batch_, residual_[static_cast<size_t>(l)], routed,
                                     stats, residual_[static_cast<size_t>(l) + 1]));
    SY_RETURN_IF_ERROR(HookAfterForward(l + 1));
    if (m >= 0 && layer.moe()->has_pregate()) {
      routed_logits_[static_cast<size_t>(m) + 1] = layer.moe()->pregate_logits();
    }
    if (!options_.with_grad) {
      layer.Release();
      residual_[static_cast<size_t>(l)] = Tensor();
      if (m >= 0) routed_logits_[static_cast<size_t>(m)] = Tensor();
    }
  }

  SY_ASSIGN_OR_RETURN(final_hidden_, backend_.Allocate(options_.compute_dtype, Shape{n, h}));
  SY_ASSIGN_OR_RETURN(logits_, backend_.Allocate(DType::kF32, Shape{n, config_.vocab_size}));
  SY_RETURN_IF_ERROR(HookBeforeForward(num_units() - 1));
  SY_RETURN_IF_ERROR(final_norm_.Forward(
      backend_, residual_[static_cast<size_t>(config_.num_layers)], final_hidden_));
  SY_RETURN_IF_ERROR(lm_head_.Forward(backend_, final_hidden_, logits_));
  SY_RETURN_IF_ERROR(HookAfterForward(num_units() - 1));

  if (targets.defined()) {
    SY_ASSIGN_OR_RETURN(targets_, UploadI32(backend_, target_ids, Shape{n}));
    SY_ASSIGN_OR_RETURN(Tensor losses, backend_.Allocate(DType::kF32, Shape{n}));
    SY_ASSIGN_OR_RETURN(ce_lse_, backend_.Allocate(DType::kF32, Shape{n}));
    backend_.CrossEntropy(logits_, targets_, losses, ce_lse_);
    if (!token_loss_weights_.empty()) {
      // Weighted: the per-token losses scaled by their row's weight before the sum.
      SY_ASSIGN_OR_RETURN(Tensor w, UploadF32(backend_, token_loss_weights_, Shape{n}));
      backend_.Mul(losses, w, losses);
    }
    backend_.Reduce(losses.Reshape({1, n}), stats_.Slice(0, 1), ReduceOp::kSum, ReduceAxis::kLast);
  }
  if (!options_.with_grad) {
    final_norm_.Release();
    residual_.clear();
  }

  SY_ASSIGN_OR_RETURN(std::vector<float> stats, DownloadF32(backend_, stats_));
  LossReport report;
  report.num_targets = targets.defined() ? num_targets_ : 0;
  report.ce_loss = !token_loss_weights_.empty() ? stats[0]
                   : report.num_targets > 0     ? stats[0] / static_cast<float>(report.num_targets)
                                                : 0.0f;
  for (int m = 0; m < num_moe; ++m) {
    const float aux = stats[static_cast<size_t>(1 + 2 * m)];
    const float z = stats[static_cast<size_t>(2 + 2 * m)];
    report.aux_per_moe_layer.push_back(aux);
    report.z_per_moe_layer.push_back(z);
    report.aux_loss += aux;
    report.z_loss += z;
  }
  report.loss = report.ce_loss +
                static_cast<float>(config_.router_aux_loss_coef) * report.aux_loss +
                static_cast<float>(config_.router_z_loss_coef) * report.z_loss;
  return report;
}

Status MoeModel::ForwardCached(const Tensor& ids, const TokenBatch& batch, const Tensor& logits) {
  SY_CHECK(batch.kv_cache != nullptr) << "MoeModel::ForwardCached without a KV cache";
  if (options_.compute_dtype != DType::kF32) {
    return FailedPreconditionError(
        "incremental decoding computes in f32; this model's compute_dtype is " +
        std::string(DTypeName(options_.compute_dtype)));
  }
  const int64_t n = batch.num_tokens(), h = config_.hidden_size;
  SY_CHECK(ids.dtype() == DType::kI32 && ids.numel() == n &&
           logits.shape() == (Shape{n, config_.vocab_size}))
      << "MoeModel::ForwardCached: ids " << ids.ToString() << ", logits " << logits.ToString();
  // What a Forward kept for its Backward goes (each layer's own is released as the layer runs).
  residual_.clear();
  routed_logits_.clear();
  final_hidden_ = targets_ = ce_lse_ = Tensor();
  // Live for the whole step: the residual stream (two buffers, in and out of each layer) and the
  // pre-gate logits routing the next MoE layer (pre-gated models). No router statistics: the
  // loss terms they feed are training's (Router::Forward skips them).
  // Everything a layer allocates after `mark` is given back once the layer is done.
  Tensor residual[2], routed[2];
  for (Tensor& x : residual) {
    SY_ASSIGN_OR_RETURN(x, backend_.Allocate(DType::kF32, Shape{n, h}));
  }
  if (config_.pregate) {
    for (Tensor& r : routed) {
      SY_ASSIGN_OR_RETURN(r, backend_.Allocate(DType::kF32, Shape{n, config_.num_experts}));
    }
  }
  const Tensor no_stats;
  Workspace* workspace = backend_.bound_workspace();
  const auto give_back = [workspace, mark = workspace ? workspace->mark() : Workspace::Mark{}] {
    if (workspace != nullptr) workspace->Rewind(mark);
  };

  SY_RETURN_IF_ERROR(HookBeforeForward(0));
  SY_RETURN_IF_ERROR(embedding_->Forward(backend_, ids, residual[0]));
  embedding_->Release();
  SY_RETURN_IF_ERROR(HookAfterForward(0));
  give_back();
  int cur = 0;
  bool have_routed = false;  // routed[cur_routed] holds the previous MoE layer's pre-gate logits
  int cur_routed = 0;
  for (int l = 0; l < config_.num_layers; ++l) {
    DecoderLayer& layer = *layers_[static_cast<size_t>(l)];
    MoeLayer* moe = layer.moe();
    Tensor routed_in;
    if (moe != nullptr && !moe->has_gate()) {
      SY_CHECK(have_routed) << "MoE layer of decoder layer " << l << " has no routing logits";
      routed_in = routed[cur_routed];
    }
    SY_RETURN_IF_ERROR(HookBeforeForward(l + 1));
    SY_RETURN_IF_ERROR(
        layer.Forward(backend_, batch, residual[cur], routed_in, no_stats, residual[1 - cur]));
    SY_RETURN_IF_ERROR(HookAfterForward(l + 1));
    if (moe != nullptr) {
      have_routed = moe->has_pregate();
      if (have_routed) {
        cur_routed = 1 - cur_routed;
        backend_.CopyAsync(moe->pregate_logits(), routed[cur_routed], backend_.compute_stream());
      }
    }
    layer.Release();
    give_back();
    cur = 1 - cur;
  }
  SY_ASSIGN_OR_RETURN(Tensor final_hidden, backend_.Allocate(DType::kF32, Shape{n, h}));
  SY_RETURN_IF_ERROR(HookBeforeForward(num_units() - 1));
  SY_RETURN_IF_ERROR(final_norm_.Forward(backend_, residual[cur], final_hidden));
  SY_RETURN_IF_ERROR(lm_head_.Forward(backend_, final_hidden, logits));
  SY_RETURN_IF_ERROR(HookAfterForward(num_units() - 1));
  final_norm_.Release();
  give_back();
  return Status::Ok();
}

Status MoeModel::Backward() {
  if (!options_.with_grad) {
    return FailedPreconditionError(
        "MoeModel::Backward on a forward-only model (with_grad = false)");
  }
  if (!targets_.defined() || residual_.empty()) {
    return FailedPreconditionError("MoeModel::Backward needs a Forward with targets first");
  }
  const int64_t n = batch_.num_tokens();
  const int64_t h = config_.hidden_size;
  Tensor dlosses;
  if (!token_loss_weights_.empty()) {
    SY_ASSIGN_OR_RETURN(dlosses, UploadF32(backend_, token_loss_weights_, Shape{n}));
  } else {
    SY_ASSIGN_OR_RETURN(dlosses, backend_.Allocate(DType::kF32, Shape{n}));
    backend_.Fill(dlosses, num_targets_ > 0 ? 1.0f / static_cast<float>(num_targets_) : 0.0f);
  }
  // Note [mixed precision]: the LM head's gradients in the compute dtype, the stream's in f32.
  const DType act = options_.compute_dtype;
  SY_ASSIGN_OR_RETURN(Tensor dlogits, backend_.Allocate(act, logits_.shape()));
  backend_.CrossEntropyBackward(logits_, targets_, ce_lse_, dlosses, dlogits);
  SY_ASSIGN_OR_RETURN(Tensor dfinal, backend_.Allocate(act, Shape{n, h}));
  SY_ASSIGN_OR_RETURN(Tensor dx, backend_.Allocate(DType::kF32, Shape{n, h}));
  SY_RETURN_IF_ERROR(HookBeforeBackward(num_units() - 1));
  SY_RETURN_IF_ERROR(lm_head_.Backward(backend_, final_hidden_, dlogits, dfinal, 0.0f));
  SY_RETURN_IF_ERROR(final_norm_.Backward(backend_, dfinal, dx));
  SY_RETURN_IF_ERROR(HookAfterBackward(num_units() - 1));

  const int num_moe = static_cast<int>(moe_layer_ids_.size());
  std::vector<Tensor> d_routed(static_cast<size_t>(num_moe));
  for (int l = config_.num_layers - 1; l >= 0; --l) {
    DecoderLayer& layer = *layers_[static_cast<size_t>(l)];
    const int m = config_.MoeIndex(l);
    Tensor d_pregate;
    if (m >= 0 && layer.moe()->has_pregate()) d_pregate = d_routed[static_cast<size_t>(m) + 1];
    SY_ASSIGN_OR_RETURN(Tensor dprev, backend_.Allocate(DType::kF32, Shape{n, h}));
    SY_RETURN_IF_ERROR(HookBeforeBackward(l + 1));
    SY_RETURN_IF_ERROR(layer.Backward(backend_, batch_, dx, d_pregate, dprev));
    SY_RETURN_IF_ERROR(HookAfterBackward(l + 1));
    if (m >= 0 && !layer.moe()->has_gate()) {
      d_routed[static_cast<size_t>(m)] = layer.moe()->routed_logits_grad();
    }
    if (m >= 0 && m + 1 < num_moe) d_routed[static_cast<size_t>(m) + 1] = Tensor();
    layer.Release();
    dx = dprev;
  }
  SY_RETURN_IF_ERROR(HookBeforeBackward(0));
  SY_RETURN_IF_ERROR(embedding_->Backward(backend_, dx));
  SY_RETURN_IF_ERROR(HookAfterBackward(0));
  // One backward per forward: the activations are gone now.
  ReleaseActivations();
  return Status::Ok();
}

void MoeModel::ReleaseActivations() {
  embedding_->Release();
  for (auto& layer : layers_) layer->Release();
  final_norm_.Release();
  residual_.clear();
  routed_logits_.clear();
  final_hidden_ = targets_ = ce_lse_ = Tensor();
}

std::string DescribeExpertDTypes(const MoeModel& model) {
  const ModelOptions& options = model.options();
  if (options.expert_layer_dtypes.empty()) return std::string(DTypeName(options.expert_dtype()));
  std::map<std::string_view, int> count;
  for (int layer = 0; layer < model.config().num_layers; ++layer) {
    if (!model.config().IsMoeLayer(layer)) continue;
    const ExpertMatrixDTypes d = options.expert_dtypes(layer);
    for (const DType t : {d.gate, d.up, d.down}) ++count[DTypeName(t)];
  }
  std::string text;
  for (const auto& [dtype, n] : count) {
    text += (text.empty() ? "" : ", ") + std::string(dtype) + " x" + std::to_string(n);
  }
  return text;
}

}  // namespace sy
