#include "inference/offload/slot_expert_runner.h"

#include <chrono>
#include <thread>

#include "inference/offload/swiglu_expert.h"
#include "runtime/core/check.h"

namespace sy::offload {
namespace {

// How long a full cache may stay full with no copy under way before EnqueueWhenSlotFree gives
// up: long enough for a finished task to release its pin.
constexpr std::chrono::milliseconds kIdleGrace{200};
constexpr std::chrono::microseconds kPoll{20};

bool EngineBusy(const TransferEngine& engine) {
  const TransferStats s = engine.stats();
  return s.tasks_queued > s.tasks_completed + s.tasks_cancelled + s.tasks_failed;
}

}  // namespace

Result<SlotHandle> EnqueueWhenSlotFree(TransferEngine& engine, TransferPriority priority,
                                       ExpertKey key, uint64_t* waited_ns) {
  Result<SlotHandle> pin = engine.Enqueue(priority, key);
  if (pin.ok() || pin.status().code() != StatusCode::kResourceExhausted) return pin;
  const auto start = std::chrono::steady_clock::now();
  auto idle_since = start;
  while (true) {
    std::this_thread::sleep_for(kPoll);
    pin = engine.Enqueue(priority, key);
    const auto now = std::chrono::steady_clock::now();
    if (pin.ok() || pin.status().code() != StatusCode::kResourceExhausted) break;
    if (EngineBusy(engine)) {
      idle_since = now;
    } else if (now - idle_since > kIdleGrace) {
      break;
    }
  }
  *waited_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  return pin;
}

Status EnqueueLayer(TransferEngine& engine, TransferPriority priority, int moe_index,
                    int num_experts, std::vector<SlotHandle>& pins, uint64_t* waited_ns) {
  pins.reserve(pins.size() + static_cast<size_t>(num_experts));
  for (int e = 0; e < num_experts; ++e) {
    const ExpertKey key{static_cast<uint32_t>(moe_index), static_cast<uint32_t>(e)};
    SY_ASSIGN_OR_RETURN(SlotHandle pin, EnqueueWhenSlotFree(engine, priority, key, waited_ns));
    pins.push_back(std::move(pin));
  }
  return Status::Ok();
}

Status RunExpertsFromSlots(Backend& backend, TransferEngine& engine, DeviceExpertCache& cache,
                           int moe_index, const Tensor& xs, std::span<const int64_t> group_rows,
                           const Tensor& ys, uint64_t* waited_ns) {
  SY_CHECK_EQ(static_cast<int>(group_rows.size()), cache.layout().num_experts) << "groups";
  int64_t row = 0;
  for (size_t e = 0; e < group_rows.size(); ++e) {
    const int64_t rows = group_rows[e];
    if (rows == 0) continue;
    const ExpertKey key{static_cast<uint32_t>(moe_index), static_cast<uint32_t>(e)};
    SY_ASSIGN_OR_RETURN(SlotHandle slot,
                        EnqueueWhenSlotFree(engine, TransferPriority::kHigh, key, waited_ns));
    SY_RETURN_IF_ERROR(engine.Wait(slot));
    SY_RETURN_IF_ERROR(RunSwigluExpert(backend, cache.chunk(slot.slot(), ExpertChunk::kGate),
                                       cache.chunk(slot.slot(), ExpertChunk::kUp),
                                       cache.chunk(slot.slot(), ExpertChunk::kDown),
                                       xs.Slice(row, row + rows), ys.Slice(row, row + rows)));
    row += rows;
  }
  return Status::Ok();
}

void CopyTransferStats(const TransferEngine& engine, uint64_t slot_wait_ns,
                       ExpertProviderStats& stats) {
  const TransferStats transfers = engine.stats();
  stats.bytes_host_to_device = static_cast<int64_t>(transfers.bytes_host_to_device);
  stats.stall_seconds = static_cast<double>(transfers.stall_ns + slot_wait_ns) * 1e-9;
}

}  // namespace sy::offload
