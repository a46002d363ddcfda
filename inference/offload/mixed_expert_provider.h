// MixedExpertProvider: the base of the policies that run some experts on the CPU and some on the
// device (cpu-compute, hot-cold, layer-split; docs/offload.md). It owns the stack they share:
// the host tier (ExpertProvider::HostTier), a CpuExpertExecutor over it, an optional device
// cache with its TransferEngine, and a MixedExpertRunner; a subclass decides each expert's
// ExpertPlacement and calls RunPlaced.
//
// Stats: bytes_host_to_device counts the weights fetched while serving (the initial placement of
// static experts, loaded at Attach, is placement_bytes() instead, as the resident policy's load
// is not counted); stall_seconds is the engine's stall (compute waiting for fetched weights).
// The time the compute thread waits for the CPU executor is placement_stats().cpu_wait_seconds.
//
// Ownership: owns the stack; destroys the runner, engine and cache before the executor and the
// host tier. Thread-safety: as ExpertProvider.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "inference/expert_provider.h"
#include "inference/offload/cpu_expert_executor.h"
#include "inference/offload/device_expert_cache.h"
#include "inference/offload/host_experts.h"
#include "inference/offload/latency_model.h"
#include "inference/offload/mixed_expert_runner.h"
#include "inference/offload/transfer_engine.h"

namespace sy::offload {

class MixedExpertProvider : public ExpertProvider {
 public:
  // After Install.
  const PlacementStats& placement_stats() const;
  uint64_t placement_bytes() const { return placement_bytes_; }
  int device_slots() const { return cache_ ? cache_->num_slots() : 0; }
  const DeviceExpertCache* cache() const { return cache_.get(); }  // null: no device slots
  TransferStats transfer_stats() const { return engine_ ? engine_->stats() : TransferStats{}; }
  // For bench infer: device_cache_hit_rate (resident / experts run), experts_resident,
  // experts_fetched, experts_cpu, rows_cpu, rows_device, cpu_wait_seconds, placement_bytes,
  // activation_bytes; subclasses add their own.
  std::map<std::string, double> extra_metrics() const override;

 protected:
  MixedExpertProvider() = default;
  // The host tier and the executor (cpu_threads: CpuExpertExecutorOptions::num_threads).
  Status AttachHost(MoeModel& model, int cpu_threads);
  // Then the device side: `num_slots` slots (0: none, every expert on the CPU) under `policy`,
  // `static_experts` loaded into their slots now (kStatic), and the runner.
  Status AttachDevice(MoeModel& model, int num_slots, DeviceCachePolicy policy,
                      std::vector<ExpertKey> static_experts);
  // What the latency-driven policies (cpu-compute, hot-cold) set up at Attach.
  struct LatencyPlacementSetup {
    int num_slots = 0;      // 0: DefaultDeviceSlots
    int scratch_slots = 0;  // kStatic: slots kept for fetches; 0: slots / 8, at least 1
    DeviceCachePolicy cache_policy = DeviceCachePolicy::kNone;
    std::string profile;  // kStatic: the popularity profile ("": uniform)
    std::optional<ExpertLatencyModel> latency_model;  // unset: calibrate on this machine
    CalibrationOptions calibration;
    int cpu_threads = 0;
  };
  // AttachHost, the static popular experts (kStatic: every slot but the scratch ones), the
  // latency model (given, or calibrated on a real expert), then AttachDevice. Returns the model.
  Result<ExpertLatencyModel> AttachWithLatencyModel(MoeModel& model,
                                                    const LatencyPlacementSetup& setup);
  Status RunPlaced(int moe_index, const Tensor& xs, std::span<const int64_t> group_rows,
                   std::span<const ExpertPlacement> placement, const Tensor& ys);

  HostExpertSource& host() { return *host_; }
  CpuExpertExecutor& executor() const { return *executor_; }
  const ExpertLayout& layout() const { return host_->layout(); }
  // Slots a fetch may take (0 without slots, or when every slot is static).
  int fetch_slots() const { return runner_ ? runner_->FetchSlots() : 0; }
  bool Resident(ExpertKey key) const { return cache_ && cache_->Lookup(key) >= 0; }

 private:
  std::shared_ptr<HostExpertSource> host_;
  std::unique_ptr<CpuExpertExecutor> executor_;
  std::unique_ptr<DeviceExpertCache> cache_;
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<MixedExpertRunner> runner_;
  uint64_t placement_bytes_ = 0;
};

}  // namespace sy::offload
