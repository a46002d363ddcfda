// PregatedExpertProvider: the `pregated` expert policy (Pre-gated MoE, ISCA'24). The model has
// pre-gates (ModelConfig::pregate): MoE layer m's pre-gate picks MoE layer m + 1's experts from
// layer m's input, so in Routed(m) the provider knows m + 1's exact expert set before m's experts
// run, and migrates exactly those while block m computes.
//
// - Routed(m): the experts prefetched for m (in Routed(m - 1)) become m's pins. Then the top-k of
//   the pre-gate logits [N, E] (Backend::TopK, the router's own selection, so the set is exactly
//   the one layer m + 1 will route to) gives m + 1's selected experts, which are Enqueue(LOW)ed
//   and pinned. LOW so that m's own experts, still fetched on demand at HIGH, go first.
// - RunExperts(m): run m's activated experts from the slots (RunExpertsFromSlots: Enqueue(HIGH)
//   hits a prefetched expert and promotes its task if still queued; an expert nobody prefetched,
//   as in MoE layer 0, whose gate runs just before it, is fetched now), then drop m's pins.
// - Never across decode steps: the last MoE layer has no pre-gate, and BeginStep drops any pin
//   left over, so MoE layer 0 is fetched on demand each step.
// - Device slots. The pins at any time are two blocks' active experts (m's and m + 1's), at most
//   2 * E; that is the default (so any batch fits; the slots actually used are reported by
//   pregated_stats().peak_slots). num_slots may be set lower, down to 2 * top_k (two blocks of
//   one token; InvalidArgument below, naming it): a block whose active experts do not fit is
//   prefetched as far as the slots allow, keeping one slot for on-demand fetches of the rest.
// - FailedPrecondition at Install when the model has no pre-gates.
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

struct PregatedOptions {
  // Device expert slots. Default: 0 = 2 * E (two blocks' active experts at any batch).
  int num_slots = 0;
  // Default: none (the slots hold exactly the two blocks' active experts).
  DeviceCachePolicy cache_policy = DeviceCachePolicy::kNone;
};

struct PregatedStats {
  int64_t selected = 0;          // experts the pre-gates selected for the next MoE layer
  int64_t prefetched = 0;        // of those, migrated while the block before ran (LOW)
  int64_t prefetch_skipped = 0;  // of those, no slot to spare: fetched on demand instead
  int64_t on_demand = 0;         // activated experts nobody prefetched (MoE layer 0, skipped)
  int peak_slots = 0;            // most slots pinned at once (+1 while fetching on demand)
};

class PregatedExpertProvider final : public ExpertProvider {
 public:
  explicit PregatedExpertProvider(const PregatedOptions& options = {}) : options_(options) {}
  std::string name() const override { return "pregated"; }

  // After Install: the device cache, the engine's counters and the policy's own.
  const DeviceExpertCache& cache() const { return *cache_; }
  TransferStats transfer_stats() const { return engine_->stats(); }
  const PregatedStats& pregated_stats() const { return pregated_stats_; }

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status OnBeginStep(Backend& backend, const ExpertStep& step) override;
  Status OnEndStep(Backend& backend) override;
  Status Routed(Backend& backend, const MoeRouting& routing) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  PregatedOptions options_;
  int top_k_ = 0;
  PregatedStats pregated_stats_;
  // Destroyed in reverse: the pins, then the engine (its pins), the cache, the host tier.
  std::shared_ptr<HostExpertSource> host_;
  std::unique_ptr<DeviceExpertCache> cache_;
  std::unique_ptr<TransferEngine> engine_;
  uint64_t slot_wait_ns_ = 0;        // waiting for slots that copies under way still pin
  std::vector<SlotHandle> current_;  // pins of the running MoE layer's prefetched experts
  std::vector<SlotHandle> next_;     // pins of MoE layer next_layer_'s prefetched experts
  int next_layer_ = -1;
};

}  // namespace sy::offload
