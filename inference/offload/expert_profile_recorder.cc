#include "inference/offload/expert_profile_recorder.h"

#include <utility>

#include "runtime/core/check.h"

namespace sy::offload {

Status ExpertProfileRecorder::Attach(MoeModel& model,
                                     std::vector<std::unique_ptr<ExpertCompute>> computes) {
  const ModelConfig& config = model.config();
  profile_ = ExpertProfile{};
  profile_.num_layers = config.NumMoeLayers();
  profile_.num_experts = config.num_experts;
  profile_.counts.assign(static_cast<size_t>(profile_.num_layers),
                         std::vector<int64_t>(static_cast<size_t>(config.num_experts), 0));
  return ResidentExpertProvider::Attach(model, std::move(computes));
}

Status ExpertProfileRecorder::Routed(Backend&, const MoeRouting& routing) {
  const int m = routing.moe_index;
  SY_CHECK(m >= 0 && m < profile_.num_layers) << "MoE layer " << m;
  std::vector<int64_t>& counts = profile_.counts[static_cast<size_t>(m)];
  for (const int32_t e : routing.routing->slot_experts) {
    SY_CHECK(e >= 0 && e < profile_.num_experts) << "routed to expert " << e;
    ++counts[static_cast<size_t>(e)];
  }
  return Status::Ok();
}

}  // namespace sy::offload
