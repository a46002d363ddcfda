// ThreadPool: a fixed set of worker threads for data-parallel loops and background tasks.
//
// ParallelFor splits [0, n) into contiguous ranges of at least `grain` items, runs them on the
// workers and the calling thread, and returns when all are done. Submit queues one task and
// returns a future.
//
// A ParallelFor publishes its loop as the pool's one open region (a generation counter and a
// reference to the caller's loop body: no allocation, no lock): idle workers join it and claim
// ranges from one counter alongside the caller. Once the caller finds no range left it closes the
// region and waits only for the workers that joined to finish their last range; a worker that had
// not woken yet is not waited for. A decode step runs about a hundred short regions back to back,
// so this is its fork/join cost. When another thread's region is open, a ParallelFor hands its
// helpers to the task queue instead (the old way: each helper a queued task).
//
// Idle workers, and ParallelFor's caller waiting for its helpers, spin for up to spin_micros()
// (SY_POOL_SPIN_US, default 100 us) before they sleep on the condition variable, as OpenMP
// runtimes and llama.cpp's pool do: waking a sleeping thread costs tens of microseconds each
// time. SY_POOL_SPIN_US=0 turns spinning off.
//
// Region accounting, off unless turned on (set_count_regions): where the threads' time goes in a
// run of regions such as a decode step (the caller's time in regions, hence alone outside them;
// the workers' share inside them; how late they join). Costs a few clock reads per region.
//
// Ownership: the pool owns its threads; the destructor finishes queued tasks and joins.
// Thread-safety: Submit and ParallelFor may be called from any thread, including from inside a
// task (a nested ParallelFor runs its ranges inline, so it never deadlocks).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "runtime/core/function_ref.h"
#include "runtime/core/mutex.h"

namespace sy {

class ThreadPool {
 public:
  // num_threads counts the caller of ParallelFor: a pool of N starts N-1 workers. N >= 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // A loop body over [begin, end), referenced and not copied, so passing a lambda never allocates.
  using RangeBody = FunctionRef<void(int64_t, int64_t)>;
  void ParallelFor(int64_t n, int64_t grain, RangeBody body);
  std::future<void> Submit(std::function<void()> task) SY_EXCLUDES(mutex_);

  // The default size: SY_NUM_THREADS if set, else the number of cores.
  static int DefaultNumThreads();
  // How long an idle thread spins before it sleeps: SY_POOL_SPIN_US if set, else 100.
  static int64_t spin_micros();

  // Totals since counting was turned on; take two and subtract them to cover a span of work.
  // Only regions count (not ParallelFors that ran inline or as queued tasks).
  struct RegionCounts {
    int64_t regions = 0;         // regions run
    int64_t region_ns = 0;       // the caller inside them, from opening to the last worker out
    int64_t joins = 0;           // workers joining a region
    int64_t join_delay_ns = 0;   // from a region's opening to a worker joining it, summed
    int64_t worker_busy_ns = 0;  // workers inside regions, summed over workers
    RegionCounts operator-(const RegionCounts& earlier) const;
  };
  // Call between regions. region_counts() may be read from any thread at any time.
  void set_count_regions(bool on) { count_regions_.store(on, std::memory_order_relaxed); }
  RegionCounts region_counts() const;

 private:
  // region_ packs the open region's generation (bits 32..63), whether it is open (bit 31) and
  // how many workers are inside it (bits 0..30).
  static constexpr uint64_t kRegionOpen = uint64_t{1} << 31;
  static constexpr uint64_t kRegionCount = kRegionOpen - 1;
  static uint64_t RegionGeneration(uint64_t r) { return r >> 32; }

  void WorkerLoop() SY_EXCLUDES(mutex_);
  // True when an open region of a generation other than `seen` is there to join.
  bool RegionToJoin(uint64_t seen) const;
  // Joins the open region if there is one newer than *seen, runs its ranges and leaves it; false
  // when there was none to join.
  bool JoinRegion(uint64_t* seen);
  // Runs `body` over [0, n) in ranges of `step` as the pool's open region, with the workers.
  void RunRegion(int64_t n, int64_t step, RangeBody body) SY_EXCLUDES(mutex_);
  // RunRegion without the accounting.
  void RunRegionRanges(int64_t n, int64_t step, RangeBody body) SY_EXCLUDES(mutex_);
  void ParallelForQueued(int64_t n, int64_t chunks, int64_t step, RangeBody body);

  int num_threads_;
  std::vector<std::thread> workers_;
  Mutex mutex_;
  CondVar cv_;
  std::deque<std::packaged_task<void()>> queue_ SY_GUARDED_BY(mutex_);
  bool stopping_ SY_GUARDED_BY(mutex_) = false;
  std::atomic<int64_t> queued_{0};    // queue_.size(), read without the lock to spin
  std::atomic<int64_t> sleepers_{0};  // workers asleep (or going to sleep) on cv_

  // The open region. Its owner holds region_mutex_ (taken with TryLock, so a second caller never
  // waits for it) and writes the fields below before it publishes them through region_ (release);
  // a worker reads them after it joined (acquire) and before it leaves.
  Mutex region_mutex_;
  std::atomic<uint64_t> region_{0};
  const RangeBody* region_body_ = nullptr;
  int64_t region_n_ = 0;
  int64_t region_step_ = 0;
  std::atomic<int64_t> region_next_{0};

  // Region accounting (set_count_regions). The caller's side is written by the region's owner
  // only; the workers' side sits on its own cache line so that they do not slow the owner's.
  std::atomic<bool> count_regions_{false};
  std::atomic<int64_t> region_opened_ns_{0};
  std::atomic<int64_t> regions_{0}, region_ns_{0};
  alignas(64) std::atomic<int64_t> joins_{0};
  std::atomic<int64_t> join_delay_ns_{0}, worker_busy_ns_{0};
};

}  // namespace sy
