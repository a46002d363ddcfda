#include "runtime/sim/sim_link.h"

#include <algorithm>
#include <thread>

#include "runtime/core/check.h"

namespace sy {

SimLink::SimLink(double gigabytes_per_second, double latency_microseconds)
    : bytes_per_second_(gigabytes_per_second * 1e9), latency_seconds_(latency_microseconds * 1e-6) {
  SY_CHECK_GT(gigabytes_per_second, 0.0) << "sim link bandwidth must be positive";
  SY_CHECK_GE(latency_microseconds, 0.0) << "sim link latency must not be negative";
}

double SimLink::TransferSeconds(size_t bytes) const {
  return latency_seconds_ + static_cast<double>(bytes) / bytes_per_second_;
}

void SimLink::Transfer(size_t bytes, const std::function<void()>& copy) {
  double seconds = TransferSeconds(bytes);
  Clock::time_point end;
  {
    MutexLock lock(&mutex_);
    Clock::time_point start = std::max(Clock::now(), free_at_);
    end =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    free_at_ = end;
    stats_.bytes += bytes;
    stats_.transfers += 1;
    stats_.busy_seconds += seconds;
  }
  copy();
  std::this_thread::sleep_until(end);
}

SimLinkStats SimLink::stats() const {
  MutexLock lock(&mutex_);
  return stats_;
}

void SimLink::ResetStats() {
  MutexLock lock(&mutex_);
  stats_ = SimLinkStats{};
}

}  // namespace sy
