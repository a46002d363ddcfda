#include "inference/offload/ondemand_expert_provider.h"

#include <utility>

#include "inference/offload/swiglu_expert.h"
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
  SY_CHECK_EQ(static_cast<int>(group_rows.size()), cache_->layout().num_experts) << "groups";
  int64_t row = 0;
  for (size_t e = 0; e < group_rows.size(); ++e) {
    const int64_t rows = group_rows[e];
    if (rows == 0) continue;
    const ExpertKey key{static_cast<uint32_t>(moe_index), static_cast<uint32_t>(e)};
    SY_ASSIGN_OR_RETURN(SlotHandle slot, engine_->Enqueue(TransferPriority::kHigh, key));
    SY_RETURN_IF_ERROR(engine_->Wait(slot));
    SY_RETURN_IF_ERROR(RunSwigluExpert(backend, cache_->chunk(slot.slot(), ExpertChunk::kGate),
                                       cache_->chunk(slot.slot(), ExpertChunk::kUp),
                                       cache_->chunk(slot.slot(), ExpertChunk::kDown),
                                       xs.Slice(row, row + rows), ys.Slice(row, row + rows)));
    row += rows;
  }
  const TransferStats transfers = engine_->stats();
  mutable_stats().bytes_host_to_device = static_cast<int64_t>(transfers.bytes_host_to_device);
  mutable_stats().stall_seconds = static_cast<double>(transfers.stall_ns) * 1e-9;
  return Status::Ok();
}

}  // namespace sy::offload
