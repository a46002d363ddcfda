// MixedExpertRunner: runs one MoE layer's activated experts where a placement policy put them
// (ExpertPlacement, inference/offload/latency_model.h): some on the device from cache slots, the
// rest on the CpuExpertExecutor, concurrently. The cpu-compute, hot-cold and layer-split
// policies are each a placement rule over this runner (docs/offload.md).
//
// Run(m, xs, group_rows, placement, ys), in this order:
//   1. CPU experts: their rows are copied device -> pinned host staging (one copy per expert,
//      then one synchronisation of the compute stream) and queued on the executor, which starts
//      at once on its own threads. Weights never move.
//   2. Device experts: the ones in a slot now are pinned (Enqueue HIGH, a hit); as many fetches
//      as slots allow are queued at HIGH, so the link works while the resident experts run.
//      Resident experts run first, then the fetched ones in order as they land; each fetched
//      expert's slot is released after its run and the next fetch queued.
//   3. The compute thread waits for the executor (cpu_wait_seconds) and copies each CPU expert's
//      results host -> its rows of ys on the compute stream.
// kResident and kFetch both mean "on the device": the runner looks the expert up itself, so an
// expert evicted since the policy decided is fetched (and counted as fetched).
//
// Slots a fetch may take: num_slots, less the static experts' slots under kStatic, less the
// residents pinned for this layer under other policies; when none is free the residents run
// first and release theirs. A fetch that finds every slot pinned (the engine drops its own pin
// just after a fill completes) is retried after the next expert ran. ResourceExhausted when a
// fetch is asked for and the cache has no slot for it at all.
//
// Ownership: borrows the backend, cache, engine and executor (all must outlive the runner); owns
// the host staging buffers, reused across calls (an event guards the previous call's copies).
// Thread-safety: one thread, the compute stream's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "inference/offload/cpu_expert_executor.h"
#include "inference/offload/device_expert_cache.h"
#include "inference/offload/latency_model.h"
#include "inference/offload/transfer_engine.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy::offload {

// Where the experts ran, since the runner was made.
struct PlacementStats {
  int64_t resident_experts = 0;  // in a device slot when asked, run there
  int64_t fetched_experts = 0;   // copied to a slot, run there
  int64_t cpu_experts = 0;       // run on the CpuExpertExecutor
  int64_t device_rows = 0;       // rows of resident + fetched experts
  int64_t cpu_rows = 0;
  int64_t activation_bytes = 0;   // CPU experts' rows moved device -> host plus results back
  double cpu_wait_seconds = 0.0;  // the compute thread blocked on the executor
  std::string ToString() const;
};

class MixedExpertRunner {
 public:
  // `cache` and `engine` may both be null: then every expert must be placed on the CPU.
  MixedExpertRunner(Backend& backend, DeviceExpertCache* cache, TransferEngine* engine,
                    CpuExpertExecutor& cpu);
  ~MixedExpertRunner();
  MixedExpertRunner(const MixedExpertRunner&) = delete;
  MixedExpertRunner& operator=(const MixedExpertRunner&) = delete;

  // xs, ys [R, H] on the device, rows grouped by expert (group_rows[e], summing to R);
  // placement[e] for every e (read only where group_rows[e] > 0). ys is written on the compute
  // stream. Errors: the engine's (a failed fetch), the executor's, or ResourceExhausted (above).
  Status Run(int moe_index, const Tensor& xs, std::span<const int64_t> group_rows,
             std::span<const ExpertPlacement> placement, const Tensor& ys);

  // Slots a fetch could take with no resident pinned (0 without a cache).
  int FetchSlots() const;
  const PlacementStats& stats() const { return stats_; }

 private:
  Status EnsureStaging(int64_t rows, int64_t hidden);
  int FetchCapacity(int64_t resident_pins) const;

  Backend& backend_;
  DeviceExpertCache* cache_;
  TransferEngine* engine_;
  CpuExpertExecutor& cpu_;
  Tensor host_x_;                        // pinned staging [capacity, H]: CPU experts' rows in
  Tensor host_y_;                        // and their results out
  std::unique_ptr<Event> staging_free_;  // recorded after the last copy out of host_y_
  bool staging_pending_ = false;
  PlacementStats stats_;
};

// The default device budget of the CPU-side policies: a quarter of all routed experts (at least
// one slot), the setting issue 7 compares them at.
int DefaultDeviceSlots(const ExpertLayout& layout);

}  // namespace sy::offload
