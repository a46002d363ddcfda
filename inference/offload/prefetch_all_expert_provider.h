// PrefetchAllExpertProvider: the `prefetch-all` expert policy (SE-MoE's MoE-Prefetch, the
// baseline of Pre-gated MoE): while MoE layer m runs, every expert of MoE layer m + 1 is copied to
// the device, whichever the gate will pick.
//
// - OnBeginStep: Enqueue(LOW) every expert of MoE layer 0 (it overlaps the layers before it).
// - RunExperts(m): first Enqueue(LOW) every expert of m + 1 and keep their pins (under the `none`
//   device cache an unpinned expert leaves its slot), then run m's activated experts from the
//   slots (RunExpertsFromSlots: Enqueue(HIGH) is a hit that promotes the expert's task when it
//   is still queued, then Wait, then compute), then drop m's pins. The last layer prefetches
//   nothing: the next step's layer 0 is prefetched by its BeginStep.
// - Device slots: two MoE layers' worth of experts, 2 * E (E when the model has one MoE layer):
//   the layer running and the one being prefetched. Fewer is InvalidArgument at Install (naming
//   the minimum); more serve the device cache (lru / lfu keep experts across steps).
// - Bytes: every expert of every MoE layer per step, E / (experts a layer activates) times
//   ondemand's, all but the first layer's overlapped with compute.
//
// Ownership: owns the device cache, the transfer engine and its pins; shares the host tier.
// Thread-safety: as ExpertProvider (one thread, the compute stream's); the engine's worker runs
// beside it.
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

struct PrefetchAllOptions {
  // Device expert slots. Default: 0 = two MoE layers' experts, 2 * E (the minimum).
  int num_slots = 0;
  // Default: none (the slots hold exactly the layer running and the next one).
  DeviceCachePolicy cache_policy = DeviceCachePolicy::kNone;
};

class PrefetchAllExpertProvider final : public ExpertProvider {
 public:
  explicit PrefetchAllExpertProvider(const PrefetchAllOptions& options = {}) : options_(options) {}
  std::string name() const override { return "prefetch-all"; }

  // After Install: the device cache and the engine's counters.
  const DeviceExpertCache& cache() const { return *cache_; }
  TransferStats transfer_stats() const { return engine_->stats(); }
  // The device slots the policy needs for `model`'s layout (2 * E, or E with one MoE layer).
  static int MinSlots(const ExpertLayout& layout);

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status OnBeginStep(Backend& backend, const ExpertStep& step) override;
  Status OnEndStep(Backend& backend) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  // Enqueue(LOW) every expert of MoE layer m into pins_[m] (no-op when pinned already).
  Status Prefetch(int moe_index);

  PrefetchAllOptions options_;
  // Destroyed in reverse: the pins, then the engine (its pins), the cache, the host tier.
  std::shared_ptr<HostExpertSource> host_;
  std::unique_ptr<DeviceExpertCache> cache_;
  std::unique_ptr<TransferEngine> engine_;
  uint64_t slot_wait_ns_ = 0;                  // waiting for slots that copies under way still pin
  std::vector<std::vector<SlotHandle>> pins_;  // per MoE layer: the prefetched experts' pins
};

}  // namespace sy::offload
