#include "launcher/training/loss_share_expert_compute.h"

#include <cmath>
#include <utility>

#include "runtime/core/check.h"

namespace sy::launcher {

LossShareExpertCompute::LossShareExpertCompute(std::unique_ptr<ExpertCompute> inner)
    : inner_(std::move(inner)) {
  SY_CHECK(inner_ != nullptr) << "LossShareExpertCompute needs an expert compute";
}

void LossShareExpertCompute::set_share(float share) {
  SY_CHECK(share >= 0.0f && std::isfinite(share)) << "loss share " << share;
  share_ = share;
}

Status LossShareExpertCompute::Forward(Backend& backend, const Tensor& xs,
                                       std::span<const int64_t> group_rows, const Tensor& ys) {
  return inner_->Forward(backend, xs, group_rows, ys);
}

Status LossShareExpertCompute::Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) {
  if (share_ == 1.0f || d_ys.numel() == 0) return inner_->Backward(backend, d_ys, d_xs);
  // In the rows' dtype: the exchange carries the activations' (16-bit in mixed precision).
  SY_ASSIGN_OR_RETURN(Tensor scaled, backend.Allocate(d_ys.dtype(), d_ys.shape()));
  backend.Scale(d_ys, share_, scaled);
  SY_RETURN_IF_ERROR(inner_->Backward(backend, scaled, d_xs));
  backend.Scale(d_xs, share_ > 0.0f ? 1.0f / share_ : 0.0f, d_xs);
  return Status::Ok();
}

}  // namespace sy::launcher
