// RingExpertProvider: the `ring` expert policy (MoESys / SE-MoE's ring memory for inference,
// "calculation-released-load"). K groups of E device slots form a ring: group j holds every
// expert of one MoE layer. When layer i has run, its group is released and MoE layer (i + K) mod L
// is loaded into it asynchronously on the copy stream, so the ring holds the next K layers in
// order and the loads of a layer overlap the compute of the K - 1 layers before it. The ring wraps
// across steps: while the last layers of a step run, the first layers of the next are loaded.
//
// - The ring starts at the first BeginStep (or the first RunExperts), loading layers 0 .. K - 1
//   at LOW priority. A layer's experts keep the provider's pins while they are in the ring (with
//   the `none` device cache an unpinned expert leaves its slot, which is what frees the group).
// - RunExperts(i): run i's activated experts from the slots (RunExpertsFromSlots: Enqueue(HIGH)
//   hits and promotes a task still queued, Wait, compute), drop i's pins, Enqueue(LOW) every
//   expert of layer (i + K) mod L. A layer found not in the ring (a step that stopped half way)
//   restarts the ring at it.
// - K = RingOptions::ring_layers (default 2), at most L; with K = L every expert is loaded once
//   and stays (the resident placement). Device slots: K * E, fixed; num_slots, when set, gives
//   K = num_slots / E (rounded down to whole layers; InvalidArgument below E, naming it).
// - Bytes: every expert of every MoE layer per step (K < L), the same as prefetch-all, but the
//   copies may run up to K - 1 layers ahead.
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

struct RingOptions {
  int ring_layers = 2;  // K, expert layers in the ring. Default: 2 (>= 1; capped at L)
  // Device expert slots; when > 0 it sets K = num_slots / E instead. Default: 0 (K * E)
  int num_slots = 0;
  // Default: none (a released group's experts leave at once; the ring is the only placement).
  DeviceCachePolicy cache_policy = DeviceCachePolicy::kNone;
};

class RingExpertProvider final : public ExpertProvider {
 public:
  explicit RingExpertProvider(const RingOptions& options = {}) : options_(options) {}
  std::string name() const override { return "ring"; }

  // After Install: K, the device cache and the engine's counters.
  int ring_layers() const { return ring_layers_; }
  const DeviceExpertCache& cache() const { return *cache_; }
  TransferStats transfer_stats() const { return engine_->stats(); }

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status OnBeginStep(Backend& backend, const ExpertStep& step) override;
  Status OnEndStep(Backend& backend) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  // Enqueue(LOW) every expert of MoE layer m into pins_[m].
  Status Load(int moe_index);
  // Drops every pin and loads layers first .. first + K - 1 (mod L).
  Status Restart(int first);

  RingOptions options_;
  int ring_layers_ = 0;  // K
  int num_layers_ = 0;   // L
  // Destroyed in reverse: the pins, then the engine (its pins), the cache, the host tier.
  std::shared_ptr<HostExpertSource> host_;
  std::unique_ptr<DeviceExpertCache> cache_;
  std::unique_ptr<TransferEngine> engine_;
  uint64_t slot_wait_ns_ = 0;                  // waiting for slots that copies under way still pin
  std::vector<std::vector<SlotHandle>> pins_;  // per MoE layer: its experts' pins while in the ring
};

}  // namespace sy::offload
