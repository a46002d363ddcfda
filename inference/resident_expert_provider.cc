#include "inference/resident_expert_provider.h"

#include <utility>

#include "runtime/core/check.h"

namespace sy {

Status ResidentExpertProvider::Attach(MoeModel& model,
                                      std::vector<std::unique_ptr<ExpertCompute>> computes) {
  (void)model;
  computes_ = std::move(computes);
  return Status::Ok();
}

ExpertCompute& ResidentExpertProvider::Layer(int moe_index) {
  SY_CHECK(moe_index >= 0 && moe_index < static_cast<int>(computes_.size()))
      << "MoE layer " << moe_index << " of " << computes_.size();
  return *computes_[static_cast<size_t>(moe_index)];
}

Status ResidentExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                          std::span<const int64_t> group_rows, const Tensor& ys) {
  return Layer(moe_index).Forward(backend, xs, group_rows, ys);
}

void ResidentExpertProvider::ReleaseLayer(int moe_index) { Layer(moe_index).Release(); }

}  // namespace sy
