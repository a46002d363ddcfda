// SimLink: one direction of the simulated host<->device link (a PCIe lane group with one DMA
// engine). A transfer of N bytes occupies the link for latency + N / bandwidth; transfers on one
// link are serialised in arrival order, as copies in one direction are on a real GPU, while the two
// directions run independently.
//
// Transfer() performs the copy and then sleeps until the modelled completion time, so the caller's
// wall clock sees the throttled duration and concurrent compute on other threads really overlaps.
//
// Ownership: owned by the SimBackend. Thread-safety: Transfer and stats are thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

#include "runtime/core/mutex.h"

namespace sy {

struct SimLinkStats {
  size_t bytes = 0;         // payload moved
  size_t transfers = 0;     // number of Transfer calls
  double busy_seconds = 0;  // modelled time the link was occupied
};

class SimLink {
 public:
  SimLink(double gigabytes_per_second, double latency_microseconds);

  // Runs `copy` and returns no earlier than the modelled end of this transfer.
  void Transfer(size_t bytes, const std::function<void()>& copy) SY_EXCLUDES(mutex_);

  // The modelled duration of a transfer of `bytes` on an idle link.
  double TransferSeconds(size_t bytes) const;

  SimLinkStats stats() const SY_EXCLUDES(mutex_);
  void ResetStats() SY_EXCLUDES(mutex_);

 private:
  using Clock = std::chrono::steady_clock;

  double bytes_per_second_;
  double latency_seconds_;
  mutable Mutex mutex_;
  Clock::time_point free_at_ SY_GUARDED_BY(mutex_);  // when the link finishes its queued transfers
  SimLinkStats stats_ SY_GUARDED_BY(mutex_);
};

}  // namespace sy
