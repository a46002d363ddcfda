#include "inference/offload/cpu_compute_expert_provider.h"

#include <cstdio>
#include <utility>

#include "runtime/core/check.h"

namespace sy::offload {

Status CpuComputeExpertProvider::Attach(MoeModel& model,
                                        std::vector<std::unique_ptr<ExpertCompute>> computes) {
  computes.clear();  // every expert comes from the host tier or the slots
  LatencyPlacementSetup setup;
  setup.num_slots = options_.num_slots;
  setup.scratch_slots = options_.scratch_slots;
  setup.cache_policy = options_.cache_policy;
  setup.profile = options_.profile;
  setup.latency_model = options_.latency_model;
  setup.calibration = options_.calibration;
  setup.cpu_threads = options_.cpu_threads;
  SY_ASSIGN_OR_RETURN(latency_, AttachWithLatencyModel(model, setup));
  placement_.assign(static_cast<size_t>(layout().num_experts), ExpertPlacement::kCpu);
  if (options_.log) std::fprintf(stderr, "%s\n", Describe().c_str());
  return Status::Ok();
}

std::string CpuComputeExpertProvider::Describe() const {
  const DeviceExpertCache* slots = cache();
  const size_t num_static = slots ? slots->options().static_experts.size() : 0;
  return "cpu-compute: " + std::to_string(device_slots()) + " device slots (" +
         std::to_string(num_static) + " static from " +
         (options_.profile.empty() ? std::string("a uniform placement") : options_.profile) + ", " +
         std::to_string(fetch_slots()) + " for fetches, cache " +
         (slots ? DeviceCachePolicyName(slots->options().policy) : "none") + ") of " +
         std::to_string(layout().num_layers * layout().num_experts) + " experts; " +
         (options_.latency_model ? "given" : "calibrated") +
         " latency model: " + latency_.ToString();
}

Status CpuComputeExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                            std::span<const int64_t> group_rows, const Tensor& ys) {
  (void)backend;
  SY_CHECK_EQ(group_rows.size(), placement_.size()) << "cpu-compute: groups";
  const bool can_fetch = fetch_slots() > 0;
  for (size_t e = 0; e < group_rows.size(); ++e) {
    if (group_rows[e] == 0) continue;
    const ExpertKey key{static_cast<uint32_t>(moe_index), static_cast<uint32_t>(e)};
    ExpertPlacement p = FiddlerPlacement(latency_, group_rows[e], Resident(key));
    if (p == ExpertPlacement::kFetch && !can_fetch) p = ExpertPlacement::kCpu;
    placement_[e] = p;
  }
  return RunPlaced(moe_index, xs, group_rows, placement_, ys);
}

std::map<std::string, double> CpuComputeExpertProvider::extra_metrics() const {
  std::map<std::string, double> metrics = MixedExpertProvider::extra_metrics();
  metrics["latency_transfer_ms"] = latency_.TransferSeconds() * 1e3;
  metrics["latency_cpu1_ms"] = latency_.CpuSeconds(1) * 1e3;
  metrics["latency_device1_ms"] = latency_.DeviceSeconds(1) * 1e3;
  return metrics;
}

}  // namespace sy::offload
