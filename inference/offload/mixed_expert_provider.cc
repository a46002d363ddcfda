#include "inference/offload/mixed_expert_provider.h"

#include <algorithm>
#include <utility>

#include "inference/offload/expert_profile.h"
#include "runtime/core/check.h"

namespace sy::offload {

const PlacementStats& MixedExpertProvider::placement_stats() const {
  SY_CHECK(runner_ != nullptr) << "MixedExpertProvider::placement_stats before Install";
  return runner_->stats();
}

std::map<std::string, double> MixedExpertProvider::extra_metrics() const {
  std::map<std::string, double> metrics;
  if (runner_ == nullptr) return metrics;
  const PlacementStats& s = runner_->stats();
  const int64_t run = s.resident_experts + s.fetched_experts + s.cpu_experts;
  if (run > 0) {
    metrics["device_cache_hit_rate"] =
        static_cast<double>(s.resident_experts) / static_cast<double>(run);
  }
  metrics["experts_resident"] = static_cast<double>(s.resident_experts);
  metrics["experts_fetched"] = static_cast<double>(s.fetched_experts);
  metrics["experts_cpu"] = static_cast<double>(s.cpu_experts);
  metrics["rows_device"] = static_cast<double>(s.device_rows);
  metrics["rows_cpu"] = static_cast<double>(s.cpu_rows);
  metrics["cpu_wait_seconds"] = s.cpu_wait_seconds;
  metrics["activation_bytes"] = static_cast<double>(s.activation_bytes);
  metrics["placement_bytes"] = static_cast<double>(placement_bytes_);
  return metrics;
}

Status MixedExpertProvider::AttachHost(MoeModel& model, int cpu_threads) {
  SY_ASSIGN_OR_RETURN(host_, HostTier(model));
  CpuExpertExecutorOptions options;
  options.num_threads = cpu_threads;
  executor_ = std::make_unique<CpuExpertExecutor>(*host_, options);
  return Status::Ok();
}

Result<ExpertLatencyModel> MixedExpertProvider::AttachWithLatencyModel(
    MoeModel& model, const LatencyPlacementSetup& setup) {
  SY_RETURN_IF_ERROR(AttachHost(model, setup.cpu_threads));
  const int slots = setup.num_slots > 0 ? setup.num_slots : DefaultDeviceSlots(layout());
  std::vector<ExpertKey> static_experts;
  if (setup.cache_policy == DeviceCachePolicy::kStatic) {
    const int scratch =
        setup.scratch_slots > 0 ? std::min(setup.scratch_slots, slots) : std::max(1, slots / 8);
    SY_ASSIGN_OR_RETURN(static_experts, StaticPlacementOrder(layout(), setup.profile));
    static_experts.resize(static_cast<size_t>(std::max(0, slots - scratch)));
  }
  ExpertLatencyModel latency;
  if (setup.latency_model) {
    latency = *setup.latency_model;
  } else {
    SY_ASSIGN_OR_RETURN(
        latency, CalibrateLatencyModel(model.backend(), host(), executor(), setup.calibration));
  }
  SY_RETURN_IF_ERROR(AttachDevice(model, slots, setup.cache_policy, std::move(static_experts)));
  return latency;
}

Status MixedExpertProvider::AttachDevice(MoeModel& model, int num_slots, DeviceCachePolicy policy,
                                         std::vector<ExpertKey> static_experts) {
  SY_CHECK(executor_ != nullptr) << "MixedExpertProvider: AttachDevice before AttachHost";
  if (num_slots > 0) {
    DeviceExpertCacheOptions options;
    options.num_slots = num_slots;
    options.policy = policy;
    if (policy == DeviceCachePolicy::kStatic) {
      if (static_cast<int>(static_experts.size()) > num_slots) static_experts.resize(num_slots);
      options.static_experts = std::move(static_experts);
    }
    SY_ASSIGN_OR_RETURN(cache_, DeviceExpertCache::Create(model.backend(), layout(), options));
    engine_ = std::make_unique<TransferEngine>(model.backend(), *host_, *cache_);
    // The static experts go to their slots now (the pins are dropped at once: static stays).
    for (const ExpertKey& key : cache_->options().static_experts) {
      SY_ASSIGN_OR_RETURN(SlotHandle pin, engine_->Enqueue(TransferPriority::kLow, key));
      (void)pin;
    }
    engine_->Drain();
    const TransferStats loaded = engine_->stats();
    if (loaded.tasks_failed > 0) {
      return InternalError(
          "MixedExpertProvider: loading the static experts into device slots "
          "failed; the host tier could not provide them");
    }
    placement_bytes_ = loaded.bytes_host_to_device;
  }
  runner_ =
      std::make_unique<MixedExpertRunner>(model.backend(), cache_.get(), engine_.get(), *executor_);
  return Status::Ok();
}

Status MixedExpertProvider::RunPlaced(int moe_index, const Tensor& xs,
                                      std::span<const int64_t> group_rows,
                                      std::span<const ExpertPlacement> placement,
                                      const Tensor& ys) {
  SY_CHECK(runner_ != nullptr) << "MixedExpertProvider: RunExperts before Install";
  SY_RETURN_IF_ERROR(runner_->Run(moe_index, xs, group_rows, placement, ys));
  if (engine_) {
    const TransferStats transfers = engine_->stats();
    mutable_stats().bytes_host_to_device =
        static_cast<int64_t>(transfers.bytes_host_to_device - placement_bytes_);
    mutable_stats().stall_seconds = static_cast<double>(transfers.stall_ns) * 1e-9;
  }
  return Status::Ok();
}

}  // namespace sy::offload
