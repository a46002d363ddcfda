#include "runtime/model/router.h"

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"
#include "runtime/model/sigmoid_routing.h"

namespace sy {

Status Router::Forward(Backend& backend, const Tensor& logits, const Tensor& stats) {
  const int e = options_.num_experts;
  const int k = options_.top_k;
  SY_CHECK(logits.rank() == 2 && logits.dim(1) == e) << "router logits " << logits.ToString();
  SY_CHECK(!stats.defined() || stats.numel() == 2) << "router stats " << stats.ToString();
  const int64_t n = logits.dim(0);
  logits_ = logits;
  if (options_.scoring == RouterScoring::kSigmoid) {
    SY_CHECK(!stats.defined()) << "sigmoid routing is inference only (no router statistics)";
    return ForwardSigmoid(backend, logits);
  }

  SY_ASSIGN_OR_RETURN(probs_, backend.Allocate(DType::kF32, Shape{n, e}));
  backend.Softmax(logits, probs_);
  SY_ASSIGN_OR_RETURN(top_logits_, backend.Allocate(DType::kF32, Shape{n, k}));
  SY_ASSIGN_OR_RETURN(Tensor top_index, backend.Allocate(DType::kI32, Shape{n, k}));
  // Selecting on logits rather than probs: the same order, without softmax rounding making two
  // distinct logits tie.
  backend.TopK(logits, k, top_logits_, top_index);
  SY_ASSIGN_OR_RETURN(slot_experts_, DownloadI32(backend, top_index));

  // Row n*E + expert of the flattened [N*E] probabilities, for each slot.
  std::vector<int32_t> flat(slot_experts_.size());
  std::vector<int64_t> routed(static_cast<size_t>(e), 0);
  for (size_t s = 0; s < flat.size(); ++s) {
    const int32_t expert = slot_experts_[s];
    SY_CHECK(expert >= 0 && expert < e) << "TopK returned expert " << expert;
    flat[s] = static_cast<int32_t>(static_cast<int64_t>(s) / k * e + expert);
    ++routed[static_cast<size_t>(expert)];
  }
  SY_ASSIGN_OR_RETURN(flat_index_, UploadI32(backend, flat, Shape{n * k}));

  SY_ASSIGN_OR_RETURN(weights_, backend.Allocate(DType::kF32, Shape{n, k}));
  if (options_.norm_topk_prob) {
    backend.Softmax(top_logits_, weights_);
  } else {
    backend.GatherRows(probs_.Reshape({n * e, 1}), flat_index_, weights_.Reshape({n * k, 1}));
  }

  // Inference: no statistics, and none of the work for them (a Backward needs them).
  if (!stats.defined()) return Status::Ok();

  // aux = E * f . P, on the device.
  std::vector<float> f(static_cast<size_t>(e));
  for (int i = 0; i < e; ++i) {
    f[static_cast<size_t>(i)] =
        static_cast<float>(static_cast<double>(routed[i]) / static_cast<double>(n * k));
  }
  SY_ASSIGN_OR_RETURN(Tensor f_dev, UploadF32(backend, f, Shape{1, e}));
  SY_ASSIGN_OR_RETURN(Tensor mean_probs, backend.Allocate(DType::kF32, Shape{e, 1}));
  backend.Reduce(probs_, mean_probs.Reshape({e}), ReduceOp::kMean, ReduceAxis::kFirst);
  backend.Gemm(f_dev, mean_probs, stats.Slice(0, 1).Reshape({1, 1}),
               GemmOptions{.alpha = static_cast<float>(e)});
  // d(aux_coef * aux)/d probs[n, e] = aux_coef * E * f_e / N, the same for every token.
  if (options_.aux_loss_coef > 0.0f) {
    std::vector<float> g(f.size());
    for (size_t i = 0; i < f.size(); ++i) {
      g[i] = static_cast<float>(static_cast<double>(options_.aux_loss_coef) * loss_scale_ * e *
                                f[i] / static_cast<double>(n));
    }
    SY_ASSIGN_OR_RETURN(aux_grad_, UploadF32(backend, g, Shape{e}));
  }

  // z = mean(lse^2). CrossEntropy is the backend's log-sum-exp; the dummy target 0 is valid for
  // every row so each row's lse is computed, and the per-row losses are not used.
  SY_ASSIGN_OR_RETURN(lse_, backend.Allocate(DType::kF32, Shape{n}));
  SY_ASSIGN_OR_RETURN(Tensor targets, backend.Allocate(DType::kI32, Shape{n}));
  backend.Fill(targets, 0.0f);
  SY_ASSIGN_OR_RETURN(Tensor unused_losses, backend.Allocate(DType::kF32, Shape{n}));
  backend.CrossEntropy(logits, targets, unused_losses, lse_);
  SY_ASSIGN_OR_RETURN(Tensor sum_sq, backend.Allocate(DType::kF32, Shape{1}));
  backend.Reduce(lse_.Reshape({1, n}), sum_sq, ReduceOp::kSumSquares, ReduceAxis::kLast);
  backend.Scale(sum_sq, 1.0f / static_cast<float>(n), stats.Slice(1, 2));
  return Status::Ok();
}

Status Router::ForwardSigmoid(Backend& backend, const Tensor& logits) {
  SY_ASSIGN_OR_RETURN(std::vector<float> host_logits, DownloadF32(backend, logits));
  std::vector<float> bias;
  if (options_.expert_bias.defined()) {
    SY_ASSIGN_OR_RETURN(bias, DownloadF32(backend, options_.expert_bias));
  }
  SigmoidRouting routing = SigmoidRoute(host_logits, bias,
                                        SigmoidRoutingOptions{
                                            .num_experts = options_.num_experts,
                                            .top_k = options_.top_k,
                                            .num_groups = options_.num_groups,
                                            .topk_groups = options_.topk_groups,
                                            .norm_topk_prob = options_.norm_topk_prob,
                                            .routed_scaling_factor = options_.routed_scaling_factor,
                                        });
  slot_experts_ = std::move(routing.experts);
  SY_ASSIGN_OR_RETURN(weights_,
                      UploadF32(backend, routing.weights, Shape{logits.dim(0), options_.top_k}));
  probs_ = Tensor();
  return Status::Ok();
}

Status Router::Backward(Backend& backend, const Tensor& d_weights, const Tensor& d_logits) {
  SY_CHECK(options_.scoring == RouterScoring::kSoftmax) << "Router::Backward of sigmoid routing";
  SY_CHECK(probs_.defined()) << "Router::Backward without a Forward";
  SY_CHECK(lse_.defined()) << "Router::Backward after a Forward without stats (inference)";
  const int e = options_.num_experts;
  const int k = options_.top_k;
  const int64_t n = probs_.dim(0);
  SY_CHECK(d_weights.shape() == (Shape{n, k})) << "router d_weights " << d_weights.ToString();
  SY_CHECK(d_logits.shape() == (Shape{n, e})) << "router d_logits " << d_logits.ToString();

  const bool renorm = options_.norm_topk_prob;
  const bool aux = options_.aux_loss_coef > 0.0f;
  // Through the full softmax: the un-renormalised weights and the aux loss.
  if (!renorm || aux) {
    SY_ASSIGN_OR_RETURN(Tensor dprobs, Zeros(backend, Shape{n, e}));
    if (!renorm) {
      backend.ScatterAddRows(d_weights.Reshape({n * k, 1}), flat_index_, Tensor(),
                             dprobs.Reshape({n * e, 1}));
    }
    if (aux) {
      SY_ASSIGN_OR_RETURN(Tensor with_aux, backend.Allocate(DType::kF32, Shape{n, e}));
      backend.AddBias(dprobs, aux_grad_, with_aux);
      dprobs = with_aux;
    }
    backend.SoftmaxBackward(probs_, dprobs, d_logits);
  } else {
    backend.Fill(d_logits, 0.0f);
  }
  // Through the softmax over the chosen logits (renormalised weights).
  if (renorm) {
    SY_ASSIGN_OR_RETURN(Tensor d_top, backend.Allocate(DType::kF32, Shape{n, k}));
    backend.SoftmaxBackward(weights_, d_weights, d_top);
    backend.ScatterAddRows(d_top.Reshape({n * k, 1}), flat_index_, Tensor(),
                           d_logits.Reshape({n * e, 1}));
  }
  // d(z_coef * mean lse^2)/d logits[n, :] = z_coef * 2 lse_n / N * probs[n, :]: a per-row scale,
  // done as a scatter-add onto the same rows.
  if (options_.z_loss_coef > 0.0f) {
    SY_ASSIGN_OR_RETURN(Tensor row_scale, backend.Allocate(DType::kF32, Shape{n}));
    backend.Scale(lse_, 2.0f * options_.z_loss_coef * loss_scale_ / static_cast<float>(n),
                  row_scale);
    SY_ASSIGN_OR_RETURN(Tensor rows, Iota(backend, n));
    backend.ScatterAddRows(probs_, rows, row_scale, d_logits);
  }
  return Status::Ok();
}

void Router::Release() {
  logits_ = probs_ = top_logits_ = weights_ = flat_index_ = lse_ = aux_grad_ = Tensor();
}

}  // namespace sy
