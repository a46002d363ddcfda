// OnDemandExpertProvider: the `ondemand` expert policy (Pre-gated MoE's MoE-OnDemand baseline;
// with an LRU cache, Mixtral-offloading's LRU + fetch). Per MoE layer, after the gate: for each
// activated expert in turn, fetch it at HIGH priority into a device slot (TransferEngine), wait
// for it, run it on the device (RunSwigluExpert on the slot's chunks), release it. Serial: nothing
// is fetched before the gate asks for it, and no copy overlaps an expert's compute.
//
// Attach takes the host tier (ExpertProvider::HostTier: the one set, or the model's routed
// experts copied to pinned host memory) and
// allocates OnDemandOptions::num_slots device slots; from then on every expert is computed from
// the slots, never from the model's own expert weights.
//
// Ownership: owns the host tier, the device cache and the transfer engine. Thread-safety: as
// ExpertProvider (one thread, the compute stream's); the engine's worker runs beside it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inference/expert_provider.h"
#include "inference/offload/device_expert_cache.h"
#include "inference/offload/host_experts.h"
#include "inference/offload/transfer_engine.h"

namespace sy::offload {

struct OnDemandOptions {
  int num_slots = 2;  // device expert slots (the device budget for experts). Default: 2
  // Default: none, every activated expert is fetched (MoE-OnDemand); lru/lfu/static keep some.
  DeviceCachePolicy cache_policy = DeviceCachePolicy::kNone;
};

class OnDemandExpertProvider final : public ExpertProvider {
 public:
  explicit OnDemandExpertProvider(const OnDemandOptions& options = {}) : options_(options) {}
  std::string name() const override { return "ondemand"; }

  // After Install: the device cache and the engine's counters.
  const DeviceExpertCache& cache() const { return *cache_; }
  TransferStats transfer_stats() const { return engine_->stats(); }

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  OnDemandOptions options_;
  // Destroyed in reverse: the engine (its pins) before the cache before the host tier.
  std::shared_ptr<HostExpertSource> host_;
  std::unique_ptr<DeviceExpertCache> cache_;
  std::unique_ptr<TransferEngine> engine_;
  uint64_t slot_wait_ns_ = 0;  // waiting for a slot a finished copy still pins
};

}  // namespace sy::offload
