// The device half every slot-based expert policy shares (ondemand, prefetch-all, ring, pregated):
// run the activated experts of one MoE layer from DeviceExpertCache slots, and copy the transfer
// engine's counters into the provider's stats.
//
// EnqueueWhenSlotFree is TransferEngine::Enqueue that waits out a full cache: a slot pinned by
// the engine comes back once its task ends (a cancelled or finished task's pin is released just
// after its last chunk lands; a prefetch queued earlier completes), so while the engine has work
// under way a ResourceExhausted is transient and the caller retries. It gives up with the
// ResourceExhausted when the engine has nothing under way for a while (the slots are pinned by
// their holders, not by copies). The time spent waiting is added to *waited_ns.
//
// RunExpertsFromSlots takes the experts with rows in index order. For each: Enqueue(HIGH) (a hit
// when a policy prefetched or holds it, which also promotes a still queued LOW task; a miss
// fetches it now), Wait (the blocked time is the engine's stall), RunSwigluExpert on the slot's
// chunks, then release the pin. So it needs one free (or evictable) slot only for experts that
// are neither resident nor pinned by the policy.
//
// Ownership: borrows everything. Thread-safety: the thread that drives the compute stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "inference/expert_provider.h"
#include "inference/offload/device_expert_cache.h"
#include "inference/offload/transfer_engine.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy::offload {

Result<SlotHandle> EnqueueWhenSlotFree(TransferEngine& engine, TransferPriority priority,
                                       ExpertKey key, uint64_t* waited_ns);
// Every expert of MoE layer `moe_index` through EnqueueWhenSlotFree at `priority`, appended to
// `pins` in expert order (prefetch-all's next layer, a ring group's layer).
Status EnqueueLayer(TransferEngine& engine, TransferPriority priority, int moe_index,
                    int num_experts, std::vector<SlotHandle>& pins, uint64_t* waited_ns);

// xs [R, H] rows grouped by expert, group_rows[e] for expert e of MoE layer `moe_index`;
// ys [R, H] is overwritten, on the compute stream. As ExpertProvider::RunExperts. Time spent
// waiting for a free slot is added to *waited_ns.
Status RunExpertsFromSlots(Backend& backend, TransferEngine& engine, DeviceExpertCache& cache,
                           int moe_index, const Tensor& xs, std::span<const int64_t> group_rows,
                           const Tensor& ys, uint64_t* waited_ns);

// stats.bytes_host_to_device from the engine; stats.stall_seconds = the engine's stall (Wait)
// plus `slot_wait_ns` (EnqueueWhenSlotFree), both on the compute thread's critical path.
void CopyTransferStats(const TransferEngine& engine, uint64_t slot_wait_ns,
                       ExpertProviderStats& stats);

}  // namespace sy::offload
