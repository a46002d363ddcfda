#include "runtime/core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/core/check.h"
#include "runtime/core/env.h"

namespace sy {
namespace {
thread_local bool t_inside_pool_task = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Adds to a counter that one thread at a time writes (a region's owner, under region_mutex_).
void Add(std::atomic<int64_t>& counter, int64_t value) {
  counter.store(counter.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
}

// Spins until `ready()` or `micros` have passed; returns ready().
template <typename Ready>
bool SpinUntil(int64_t micros, const Ready& ready) {
  if (micros <= 0) return ready();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}
}  // namespace

int64_t ThreadPool::spin_micros() {
  static const int64_t micros = std::max<int64_t>(0, EnvInt("SY_POOL_SPIN_US", 100));
  return micros;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (auto& worker : workers_) worker.join();
}

int ThreadPool::DefaultNumThreads() {
  int64_t from_env = EnvInt("SY_NUM_THREADS", 0);
  if (from_env > 0) return static_cast<int>(from_env);
  return std::max(1u, std::thread::hardware_concurrency());
}

bool ThreadPool::RegionToJoin(uint64_t seen) const {
  const uint64_t r = region_.load();  // sequentially consistent: see WorkerLoop
  return (r & kRegionOpen) != 0 && RegionGeneration(r) != seen;
}

bool ThreadPool::JoinRegion(uint64_t* seen) {
  uint64_t r = region_.load(std::memory_order_acquire);
  for (;;) {
    if ((r & kRegionOpen) == 0 || RegionGeneration(r) == *seen) return false;
    if (region_.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      break;
    }
  }
  *seen = RegionGeneration(r);
  const bool count = count_regions_.load(std::memory_order_relaxed);
  const int64_t joined_ns = count ? NowNs() : 0;
  for (int64_t begin = region_next_.fetch_add(region_step_); begin < region_n_;
       begin = region_next_.fetch_add(region_step_)) {
    (*region_body_)(begin, std::min(region_n_, begin + region_step_));
  }
  if (count) {
    joins_.fetch_add(1, std::memory_order_relaxed);
    join_delay_ns_.fetch_add(joined_ns - region_opened_ns_.load(std::memory_order_relaxed),
                             std::memory_order_relaxed);
    worker_busy_ns_.fetch_add(NowNs() - joined_ns, std::memory_order_relaxed);
  }
  region_.fetch_sub(1, std::memory_order_release);
  return true;
}

void ThreadPool::WorkerLoop() {
  t_inside_pool_task = true;
  uint64_t seen = 0;  // the generation before the first region (even one opened before this ran)
  for (;;) {
    SpinUntil(spin_micros(),
              [&] { return queued_.load(std::memory_order_acquire) > 0 || RegionToJoin(seen); });
    if (JoinRegion(&seen)) continue;
    std::packaged_task<void()> task;
    {
      MutexLock lock(&mutex_);
      // sleepers_ is raised before the region is checked, and RunRegion publishes the region
      // before it reads sleepers_ (both sequentially consistent): either this thread sees the
      // region, or RunRegion sees a sleeper and notifies under mutex_.
      sleepers_.fetch_add(1);
      while (!stopping_ && queue_.empty() && !RegionToJoin(seen)) cv_.Wait(&mutex_);
      sleepers_.fetch_sub(1);
      if (queue_.empty()) {
        if (stopping_) return;  // stopping and drained
        continue;               // a region to join (or one that has closed since)
      }
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
    }
    task();
  }
}

std::future<void> ThreadPool::Submit(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> future = packaged.get_future();
  if (workers_.empty()) {
    packaged();
    return future;
  }
  {
    MutexLock lock(&mutex_);
    SY_CHECK(!stopping_) << "Submit on a stopping ThreadPool";
    queue_.push_back(std::move(packaged));
    queued_.fetch_add(1, std::memory_order_release);
  }
  cv_.NotifyOne();
  return future;
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, RangeBody body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  int64_t chunks = std::min<int64_t>(num_threads_, max_chunks);
  if (chunks <= 1 || t_inside_pool_task) {
    body(0, n);
    return;
  }
  const int64_t step = (n + chunks - 1) / chunks;
  if (region_mutex_.TryLock()) {
    RunRegion(n, step, body);
    region_mutex_.Unlock();
    return;
  }
  ParallelForQueued(n, chunks, step, body);
}

void ThreadPool::RunRegion(int64_t n, int64_t step, RangeBody body) {
  const bool count = count_regions_.load(std::memory_order_relaxed);
  // The opening time is published to the workers by RunRegionRanges's store to region_.
  if (count) region_opened_ns_.store(NowNs(), std::memory_order_relaxed);
  RunRegionRanges(n, step, body);
  if (count) {
    Add(regions_, 1);
    Add(region_ns_, NowNs() - region_opened_ns_.load(std::memory_order_relaxed));
  }
}

void ThreadPool::RunRegionRanges(int64_t n, int64_t step, RangeBody body) {
  region_body_ = &body;
  region_n_ = n;
  region_step_ = step;
  region_next_.store(0, std::memory_order_relaxed);
  const uint64_t generation = RegionGeneration(region_.load(std::memory_order_relaxed)) + 1;
  region_.store((generation << 32) | kRegionOpen);  // publishes the fields above
  if (sleepers_.load() > 0) {
    MutexLock lock(&mutex_);
    cv_.NotifyAll();
  }
  const bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;
  for (int64_t begin = region_next_.fetch_add(step); begin < n;
       begin = region_next_.fetch_add(step)) {
    body(begin, std::min(n, begin + step));
  }
  t_inside_pool_task = was_inside;
  // No range is left: close the region so that no worker joins it late, then wait for the ones
  // inside to finish their last range (they are running, so spinning is the right wait).
  const uint64_t inside = region_.fetch_and(~kRegionOpen, std::memory_order_acq_rel);
  if ((inside & kRegionCount) == 0) return;
  // (On a loaded machine a worker inside may have been descheduled: yield now and then.)
  for (int spins = 1; (region_.load(std::memory_order_acquire) & kRegionCount) != 0; ++spins) {
    if (spins % 256 == 0) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
  }
}

ThreadPool::RegionCounts ThreadPool::region_counts() const {
  RegionCounts c;
  c.regions = regions_.load(std::memory_order_relaxed);
  c.region_ns = region_ns_.load(std::memory_order_relaxed);
  c.joins = joins_.load(std::memory_order_relaxed);
  c.join_delay_ns = join_delay_ns_.load(std::memory_order_relaxed);
  c.worker_busy_ns = worker_busy_ns_.load(std::memory_order_relaxed);
  return c;
}

ThreadPool::RegionCounts ThreadPool::RegionCounts::operator-(const RegionCounts& earlier) const {
  return {regions - earlier.regions, region_ns - earlier.region_ns, joins - earlier.joins,
          join_delay_ns - earlier.join_delay_ns, worker_busy_ns - earlier.worker_busy_ns};
}

void ThreadPool::ParallelForQueued(int64_t n, int64_t chunks, int64_t step, RangeBody body) {
  // Ranges are claimed dynamically, so a slow worker does not hold up the rest.
  std::atomic<int64_t> next{0};
  auto run_ranges = [&] {
    for (;;) {
      int64_t begin = next.fetch_add(step);
      if (begin >= n) return;
      body(begin, std::min(n, begin + step));
    }
  };
  std::atomic<int64_t> helpers_done{0};
  auto helper = [&] {
    run_ranges();
    helpers_done.fetch_add(1, std::memory_order_release);
  };
  std::vector<std::future<void>> helpers;
  helpers.reserve(static_cast<size_t>(chunks - 1));
  for (int64_t i = 1; i < chunks; ++i) helpers.push_back(Submit(helper));
  bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;
  run_ranges();
  t_inside_pool_task = was_inside;
  // Usually the helpers are finishing their last range: spin rather than sleep on the futures.
  SpinUntil(spin_micros(),
            [&] { return helpers_done.load(std::memory_order_acquire) == chunks - 1; });
  for (auto& f : helpers) f.get();
}

}  // namespace sy
