// LossShareExpertCompute: wraps a layer's expert-parallel ExpertCompute so that each rank's
// contribution to the experts' weight gradients carries that rank's share of the global loss.
//
// Why. A data-parallel rank r computes the gradient of its own loss, the mean cross-entropy over
// its n_r targets. The single-process loss on the global batch is sum_r (n_r / N) * loss_r, so
// rank r's gradients must be scaled by share_r = n_r / N. Dense gradients are local and can be
// scaled after Backward; the expert owners, however, add up rows from every rank of the EP group
// in one backward GEMM, so the scaling must happen before the rows leave their rank. Backward
// therefore sends share * d_ys through the wrapped compute (the owners accumulate exactly the
// single-process expert gradient) and divides the returned input gradient by share again, so the
// rest of the rank's backward sees its own unscaled loss (its dense gradients are scaled by the
// trainer afterwards). A share of 0 (a rank without targets) sends zeros and returns zeros.
// A share of 1 passes everything through unchanged.
//
// Ownership: owns the wrapped compute. Thread-safety: as the wrapped compute.
#pragma once

#include <memory>
#include <span>

#include "runtime/model/expert_compute.h"

namespace sy::launcher {

class LossShareExpertCompute final : public ExpertCompute {
 public:
  explicit LossShareExpertCompute(std::unique_ptr<ExpertCompute> inner);

  // This rank's n_r / N for the coming Backward (>= 0). Default: 1.
  void set_share(float share);
  float share() const { return share_; }

  Status Forward(Backend& backend, const Tensor& xs, std::span<const int64_t> group_rows,
                 const Tensor& ys) override;
  Status Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) override;
  void Release() override { inner_->Release(); }

  ExpertCompute& inner() { return *inner_; }

 private:
  std::unique_ptr<ExpertCompute> inner_;
  float share_ = 1.0f;
};

}  // namespace sy::launcher
