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

void ThreadPool::WorkerLoop() {
  t_inside_pool_task = true;
  for (;;) {
    std::packaged_task<void()> task;
    SpinUntil(spin_micros(), [this] { return queued_.load(std::memory_order_acquire) > 0; });
    {
      MutexLock lock(&mutex_);
      while (!stopping_ && queue_.empty()) cv_.Wait(&mutex_);
      if (queue_.empty()) return;  // stopping and drained
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

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_chunks = (n + grain - 1) / grain;
  int64_t chunks = std::min<int64_t>(num_threads_, max_chunks);
  if (chunks <= 1 || t_inside_pool_task) {
    body(0, n);
    return;
  }
  // Ranges are claimed dynamically, so a slow worker does not hold up the rest.
  std::atomic<int64_t> next{0};
  int64_t step = (n + chunks - 1) / chunks;
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
