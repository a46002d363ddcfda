#include "inference/offload/ring_expert_provider.h"

#include <algorithm>
#include <string>
#include <utility>

#include "inference/offload/slot_expert_runner.h"
#include "runtime/core/check.h"

namespace sy::offload {

Status RingExpertProvider::Attach(MoeModel& model,
                                  std::vector<std::unique_ptr<ExpertCompute>> computes) {
  // The model's own expert computations are not used: every expert comes from the slots.
  computes.clear();
  SY_ASSIGN_OR_RETURN(host_, HostTier(model));
  const ExpertLayout& layout = host_->layout();
  num_layers_ = layout.num_layers;
  const int e = layout.num_experts;
  if (options_.num_slots > 0) {
    if (options_.num_slots < e) {
      return InvalidArgumentError("ring needs at least " + std::to_string(e) +
                                  " device expert slots (one MoE layer's experts), got " +
                                  std::to_string(options_.num_slots));
    }
    ring_layers_ = options_.num_slots / e;
  } else {
    if (options_.ring_layers < 1) {
      return InvalidArgumentError("ring: RingOptions.ring_layers must be >= 1, got " +
                                  std::to_string(options_.ring_layers));
    }
    ring_layers_ = options_.ring_layers;
  }
  ring_layers_ = std::min(ring_layers_, num_layers_);
  DeviceExpertCacheOptions cache_options;
  cache_options.num_slots = ring_layers_ * e;
  cache_options.policy = options_.cache_policy;
  SY_ASSIGN_OR_RETURN(cache_, DeviceExpertCache::Create(model.backend(), layout, cache_options));
  engine_ = std::make_unique<TransferEngine>(model.backend(), *host_, *cache_);
  pins_.clear();
  pins_.resize(static_cast<size_t>(num_layers_));
  return Status::Ok();
}

Status RingExpertProvider::Load(int moe_index) {
  std::vector<SlotHandle>& pins = pins_[static_cast<size_t>(moe_index)];
  SY_CHECK(pins.empty()) << "ring: MoE layer " << moe_index << " is in the ring already";
  return EnqueueLayer(*engine_, TransferPriority::kLow, moe_index, cache_->layout().num_experts,
                      pins, &slot_wait_ns_);
}

Status RingExpertProvider::Restart(int first) {
  // Drop the pins first so the groups are free for the loads below.
  for (std::vector<SlotHandle>& pins : pins_) pins.clear();
  for (int j = 0; j < ring_layers_; ++j) SY_RETURN_IF_ERROR(Load((first + j) % num_layers_));
  return Status::Ok();
}

Status RingExpertProvider::OnBeginStep(Backend& backend, const ExpertStep& step) {
  (void)backend;
  (void)step;
  SY_CHECK(engine_ != nullptr) << "RingExpertProvider::BeginStep before Install";
  // In steady state the previous step's last layers loaded layers 0 .. K - 1 already.
  for (int j = 0; j < ring_layers_; ++j) {
    if (pins_[static_cast<size_t>(j)].empty()) return Restart(0);
  }
  return Status::Ok();
}

Status RingExpertProvider::OnEndStep(Backend& backend) {
  (void)backend;
  CopyTransferStats(*engine_, slot_wait_ns_, mutable_stats());
  return Status::Ok();
}

Status RingExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                      std::span<const int64_t> group_rows, const Tensor& ys) {
  SY_CHECK(engine_ != nullptr) << "RingExpertProvider::RunExperts before Install";
  std::vector<SlotHandle>& pins = pins_[static_cast<size_t>(moe_index)];
  if (pins.empty()) SY_RETURN_IF_ERROR(Restart(moe_index));
  SY_RETURN_IF_ERROR(RunExpertsFromSlots(backend, *engine_, *cache_, moe_index, xs, group_rows, ys,
                                         &slot_wait_ns_));
  if (ring_layers_ < num_layers_) {
    // Calculation released, load: the group's last-use events order the copies after the
    // kernels just queued on it. The loads of i's experts the gate did not pick go on (the ring
    // moves whole layers); their slots come back as they land.
    pins.clear();
    SY_RETURN_IF_ERROR(Load((moe_index + ring_layers_) % num_layers_));
  }
  CopyTransferStats(*engine_, slot_wait_ns_, mutable_stats());
  return Status::Ok();
}

}  // namespace sy::offload
