#include "inference/offload/pregated_expert_provider.h"

#include <algorithm>
#include <string>
#include <utility>

#include "inference/offload/slot_expert_runner.h"
#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy::offload {

Status PregatedExpertProvider::Attach(MoeModel& model,
                                      std::vector<std::unique_ptr<ExpertCompute>> computes) {
  // The model's own expert computations are not used: every expert comes from the slots.
  computes.clear();
  const ModelConfig& config = model.config();
  if (!config.pregate) {
    return FailedPreconditionError(
        "pregated needs a model with pre-gates (config pregate = true; "
        "runtime/model/pregate_init.h makes one from a conventional checkpoint); use another "
        "policy for this model");
  }
  top_k_ = config.top_k;
  SY_ASSIGN_OR_RETURN(host_, HostTier(model));
  const ExpertLayout& layout = host_->layout();
  const int min_slots = std::min(2 * top_k_, 2 * layout.num_experts);
  if (options_.num_slots == 0) options_.num_slots = 2 * layout.num_experts;
  if (options_.num_slots < min_slots) {
    return InvalidArgumentError("pregated needs at least " + std::to_string(min_slots) +
                                " device expert slots (two blocks of one token's top-" +
                                std::to_string(top_k_) + " experts), got " +
                                std::to_string(options_.num_slots));
  }
  DeviceExpertCacheOptions cache_options;
  cache_options.num_slots = options_.num_slots;
  cache_options.policy = options_.cache_policy;
  SY_ASSIGN_OR_RETURN(cache_, DeviceExpertCache::Create(model.backend(), layout, cache_options));
  engine_ = std::make_unique<TransferEngine>(model.backend(), *host_, *cache_);
  return Status::Ok();
}

Status PregatedExpertProvider::OnBeginStep(Backend& backend, const ExpertStep& step) {
  (void)backend;
  (void)step;
  SY_CHECK(engine_ != nullptr) << "PregatedExpertProvider::BeginStep before Install";
  current_.clear();
  next_.clear();
  next_layer_ = -1;
  return Status::Ok();
}

Status PregatedExpertProvider::OnEndStep(Backend& backend) {
  (void)backend;
  CopyTransferStats(*engine_, slot_wait_ns_, mutable_stats());
  return Status::Ok();
}

Status PregatedExpertProvider::Routed(Backend& backend, const MoeRouting& routing) {
  SY_CHECK(engine_ != nullptr) << "PregatedExpertProvider::Routed before Install";
  const ExpertRouting& r = *routing.routing;
  const int m = routing.moe_index;
  const std::vector<int64_t>& rows = r.plan->group_rows;
  const int num_experts = cache_->layout().num_experts;
  SY_CHECK_EQ(static_cast<int>(rows.size()), num_experts) << "groups";

  // This layer's prefetched experts; one with no rows left after the capacity drop goes.
  current_.clear();
  if (next_layer_ == m) {
    for (SlotHandle& pin : next_) {
      if (rows[pin.key().expert] > 0) current_.push_back(std::move(pin));
    }
  }
  next_.clear();
  next_layer_ = -1;
  int64_t missing = 0;
  for (int e = 0; e < num_experts; ++e) {
    if (rows[static_cast<size_t>(e)] == 0) continue;
    const bool pinned = std::any_of(current_.begin(), current_.end(), [&](const SlotHandle& pin) {
      return pin.key().expert == static_cast<uint32_t>(e);
    });
    if (!pinned) ++missing;
  }
  pregated_stats_.on_demand += missing;

  // The pre-gate's choice for m + 1, exactly as m + 1's router will make it from these logits.
  const Tensor& logits = r.next_pregate_logits;
  const int64_t n = logits.defined() ? logits.dim(0) : 0;
  if (n > 0) {
    SY_CHECK(logits.dim(1) == num_experts) << "pre-gate logits " << logits.ToString();
    SY_ASSIGN_OR_RETURN(Tensor top_values, backend.Allocate(DType::kF32, Shape{n, top_k_}));
    SY_ASSIGN_OR_RETURN(Tensor top_index, backend.Allocate(DType::kI32, Shape{n, top_k_}));
    backend.TopK(logits, top_k_, top_values, top_index);
    SY_ASSIGN_OR_RETURN(std::vector<int32_t> chosen, DownloadI32(backend, top_index));
    std::vector<bool> selected(static_cast<size_t>(num_experts), false);
    for (const int32_t e : chosen) {
      SY_CHECK(e >= 0 && e < num_experts) << "TopK returned expert " << e;
      selected[static_cast<size_t>(e)] = true;
    }
    // Keep one slot for the on-demand fetches of this layer's experts that have none.
    const int64_t budget =
        options_.num_slots - static_cast<int64_t>(current_.size()) - (missing > 0 ? 1 : 0);
    for (int e = 0; e < num_experts; ++e) {
      if (!selected[static_cast<size_t>(e)]) continue;
      ++pregated_stats_.selected;
      if (static_cast<int64_t>(next_.size()) >= budget) {
        ++pregated_stats_.prefetch_skipped;
        continue;
      }
      const ExpertKey key{static_cast<uint32_t>(m + 1), static_cast<uint32_t>(e)};
      SY_ASSIGN_OR_RETURN(SlotHandle pin, EnqueueWhenSlotFree(*engine_, TransferPriority::kLow, key,
                                                              &slot_wait_ns_));
      next_.push_back(std::move(pin));
      ++pregated_stats_.prefetched;
    }
    next_layer_ = m + 1;
  }
  const int in_use = static_cast<int>(current_.size() + next_.size()) + (missing > 0 ? 1 : 0);
  pregated_stats_.peak_slots = std::max(pregated_stats_.peak_slots, in_use);
  return Status::Ok();
}

Status PregatedExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                          std::span<const int64_t> group_rows, const Tensor& ys) {
  SY_CHECK(engine_ != nullptr) << "PregatedExpertProvider::RunExperts before Install";
  const Status status = RunExpertsFromSlots(backend, *engine_, *cache_, moe_index, xs, group_rows,
                                            ys, &slot_wait_ns_);
  engine_->CancelLow(moe_index);  // prefetched but left without rows by the capacity drop
  current_.clear();
  CopyTransferStats(*engine_, slot_wait_ns_, mutable_stats());
  return status;
}

}  // namespace sy::offload
