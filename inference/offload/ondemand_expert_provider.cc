#include "inference/offload/ondemand_expert_provider.h"

#include <utility>

#include "inference/offload/slot_expert_runner.h"
#include "runtime/core/check.h"

namespace sy::offload {

Status OnDemandExpertProvider::Attach(MoeModel& model,
                                      std::vector<std::unique_ptr<ExpertCompute>> computes) {
  // The model's own expert computations are not used: every expert comes from the slots.
  computes.clear();
  SY_ASSIGN_OR_RETURN(host_, HostTier(model));
  DeviceExpertCacheOptions cache_options;
  cache_options.num_slots = options_.num_slots;
  cache_options.policy = options_.cache_policy;
  SY_ASSIGN_OR_RETURN(cache_,
                      DeviceExpertCache::Create(model.backend(), host_->layout(), cache_options));
  engine_ = std::make_unique<TransferEngine>(model.backend(), *host_, *cache_);
  return Status::Ok();
}

Status OnDemandExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                          std::span<const int64_t> group_rows, const Tensor& ys) {
  SY_CHECK(engine_ != nullptr) << "OnDemandExpertProvider::RunExperts before Install";
  SY_RETURN_IF_ERROR(RunExpertsFromSlots(backend, *engine_, *cache_, moe_index, xs, group_rows, ys,
                                         &slot_wait_ns_));
  CopyTransferStats(*engine_, slot_wait_ns_, mutable_stats());
  return Status::Ok();
}

}  // namespace sy::offload
