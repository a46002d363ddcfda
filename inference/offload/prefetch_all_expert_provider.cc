#include "inference/offload/prefetch_all_expert_provider.h"

#include <string>
#include <utility>

#include "inference/offload/slot_expert_runner.h"
#include "runtime/core/check.h"

namespace sy::offload {

int PrefetchAllExpertProvider::MinSlots(const ExpertLayout& layout) {
  return (layout.num_layers > 1 ? 2 : 1) * layout.num_experts;
}

Status PrefetchAllExpertProvider::Attach(MoeModel& model,
                                         std::vector<std::unique_ptr<ExpertCompute>> computes) {
  // The model's own expert computations are not used: every expert comes from the slots.
  computes.clear();
  SY_ASSIGN_OR_RETURN(host_, HostTier(model));
  const ExpertLayout& layout = host_->layout();
  const int min_slots = MinSlots(layout);
  if (options_.num_slots == 0) options_.num_slots = min_slots;
  if (options_.num_slots < min_slots) {
    return InvalidArgumentError("prefetch-all needs at least " + std::to_string(min_slots) +
                                " device expert slots (the experts of two MoE layers, " +
                                std::to_string(layout.num_experts) +
                                " each: the one running and the next), got " +
                                std::to_string(options_.num_slots));
  }
  DeviceExpertCacheOptions cache_options;
  cache_options.num_slots = options_.num_slots;
  cache_options.policy = options_.cache_policy;
  SY_ASSIGN_OR_RETURN(cache_, DeviceExpertCache::Create(model.backend(), layout, cache_options));
  engine_ = std::make_unique<TransferEngine>(model.backend(), *host_, *cache_);
  pins_.clear();
  pins_.resize(static_cast<size_t>(layout.num_layers));
  return Status::Ok();
}

Status PrefetchAllExpertProvider::Prefetch(int moe_index) {
  std::vector<SlotHandle>& pins = pins_[static_cast<size_t>(moe_index)];
  if (!pins.empty()) return Status::Ok();
  return EnqueueLayer(*engine_, TransferPriority::kLow, moe_index, cache_->layout().num_experts,
                      pins, &slot_wait_ns_);
}

Status PrefetchAllExpertProvider::OnBeginStep(Backend& backend, const ExpertStep& step) {
  (void)backend;
  (void)step;
  SY_CHECK(engine_ != nullptr) << "PrefetchAllExpertProvider::BeginStep before Install";
  // Pins left by a step that stopped half way are dropped, so the slots add up again.
  for (size_t m = 1; m < pins_.size(); ++m) pins_[m].clear();
  return Prefetch(0);
}

Status PrefetchAllExpertProvider::OnEndStep(Backend& backend) {
  (void)backend;
  CopyTransferStats(*engine_, slot_wait_ns_, mutable_stats());
  return Status::Ok();
}

Status PrefetchAllExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                             std::span<const int64_t> group_rows,
                                             const Tensor& ys) {
  SY_CHECK(engine_ != nullptr) << "PrefetchAllExpertProvider::RunExperts before Install";
  const size_t m = static_cast<size_t>(moe_index);
  // Copies of layer m + 1 go in before layer m's experts run, so they overlap its compute.
  if (m + 1 < pins_.size()) SY_RETURN_IF_ERROR(Prefetch(moe_index + 1));
  const Status status = RunExpertsFromSlots(backend, *engine_, *cache_, moe_index, xs, group_rows,
                                            ys, &slot_wait_ns_);
  pins_[m].clear();
  CopyTransferStats(*engine_, slot_wait_ns_, mutable_stats());
  return status;
}

}  // namespace sy::offload
