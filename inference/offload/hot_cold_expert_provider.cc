#include "inference/offload/hot_cold_expert_provider.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <utility>

#include "runtime/core/check.h"

namespace sy::offload {

Status HotColdExpertProvider::Attach(MoeModel& model,
                                     std::vector<std::unique_ptr<ExpertCompute>> computes) {
  computes.clear();  // every expert comes from the host tier or the slots
  if (!(options_.alpha >= 0)) return InvalidArgumentError("hot-cold: alpha must be >= 0");
  alpha_ = options_.alpha;
  LatencyPlacementSetup setup;
  setup.num_slots = options_.num_slots;
  setup.scratch_slots = 0;
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

std::string HotColdExpertProvider::Describe() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "alpha %.3g%s (H = alpha * %.3g * active)", alpha_,
                options_.tune_alpha ? ", tuned by replay" : "",
                latency_.LinkBytesPerSecond() /
                    std::max(1.0, latency_.LinkBytesPerSecond() + latency_.CpuBytesPerSecond()));
  const DeviceExpertCache* slots = cache();
  return "hot-cold: " + std::to_string(device_slots()) + " device slots (" +
         std::to_string(fetch_slots()) + " for fetches, cache " +
         (slots ? DeviceCachePolicyName(slots->options().policy) : "none") + ") of " +
         std::to_string(layout().num_layers * layout().num_experts) + " experts; " + buf + "; " +
         (options_.latency_model ? "given" : "calibrated") +
         " latency model: " + latency_.ToString();
}

Status HotColdExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                         std::span<const int64_t> group_rows, const Tensor& ys) {
  (void)backend;
  SY_CHECK_EQ(group_rows.size(), placement_.size()) << "hot-cold: groups";
  std::vector<int> active;
  for (size_t e = 0; e < group_rows.size(); ++e) {
    if (group_rows[e] > 0) active.push_back(static_cast<int>(e));
  }
  std::stable_sort(active.begin(), active.end(),
                   [&](int a, int b) { return group_rows[a] > group_rows[b]; });
  const int hot = fetch_slots() > 0
                      ? HotColdCount(alpha_, latency_.LinkBytesPerSecond(),
                                     latency_.CpuBytesPerSecond(), static_cast<int>(active.size()))
                      : 0;
  for (size_t i = 0; i < active.size(); ++i) {
    const int e = active[i];
    const ExpertKey key{static_cast<uint32_t>(moe_index), static_cast<uint32_t>(e)};
    placement_[e] = static_cast<int>(i) < hot ? ExpertPlacement::kFetch
                    : Resident(key)           ? ExpertPlacement::kResident
                                              : ExpertPlacement::kCpu;
  }
  SY_RETURN_IF_ERROR(RunPlaced(moe_index, xs, group_rows, placement_, ys));

  if (options_.tune_alpha && options_.history > 0) {
    history_.emplace_back(group_rows.begin(), group_rows.end());
    while (static_cast<int>(history_.size()) > options_.history) history_.pop_front();
    if (++runs_ % std::max(1, options_.retune_every) == 0) {
      const std::vector<std::vector<int64_t>> batches(history_.begin(), history_.end());
      alpha_ = TuneHotColdAlpha(latency_, batches);
      ++tunings_;
    }
  }
  return Status::Ok();
}

std::map<std::string, double> HotColdExpertProvider::extra_metrics() const {
  std::map<std::string, double> metrics = MixedExpertProvider::extra_metrics();
  metrics["latency_transfer_ms"] = latency_.TransferSeconds() * 1e3;
  metrics["latency_cpu1_ms"] = latency_.CpuSeconds(1) * 1e3;
  metrics["latency_device1_ms"] = latency_.DeviceSeconds(1) * 1e3;
  metrics["alpha"] = alpha_;
  metrics["alpha_tunings"] = tunings_;
  return metrics;
}

}  // namespace sy::offload
