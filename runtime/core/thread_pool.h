// ThreadPool: a fixed set of worker threads for data-parallel loops and background tasks.
//
// ParallelFor splits [0, n) into contiguous ranges of at least `grain` items, runs them on the
// workers and the calling thread, and returns when all are done. Submit queues one task and
// returns a future.
//
// Idle workers, and ParallelFor's caller waiting for its helpers, spin for up to spin_micros()
// (SY_POOL_SPIN_US, default 100 us) before they sleep on the condition variable, as OpenMP
// runtimes and llama.cpp's pool do: a decode step runs a hundred short parallel regions back to
// back, and waking a sleeping thread costs tens of microseconds each time. SY_POOL_SPIN_US=0
// turns spinning off.
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

  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);
  std::future<void> Submit(std::function<void()> task) SY_EXCLUDES(mutex_);

  // The default size: SY_NUM_THREADS if set, else the number of cores.
  static int DefaultNumThreads();
  // How long an idle thread spins before it sleeps: SY_POOL_SPIN_US if set, else 100.
  static int64_t spin_micros();

 private:
  void WorkerLoop() SY_EXCLUDES(mutex_);

  int num_threads_;
  std::vector<std::thread> workers_;
  Mutex mutex_;
  CondVar cv_;
  std::deque<std::packaged_task<void()>> queue_ SY_GUARDED_BY(mutex_);
  bool stopping_ SY_GUARDED_BY(mutex_) = false;
  std::atomic<int64_t> queued_{0};  // queue_.size(), read without the lock to spin
};

}  // namespace sy
