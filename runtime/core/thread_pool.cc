#include "runtime/core/thread_pool.h"

#include <algorithm>
#include <atomic>

#include "runtime/core/check.h"
#include "runtime/core/env.h"

namespace sy {
namespace {
thread_local bool t_inside_pool_task = false;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
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
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
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
    std::lock_guard<std::mutex> lock(mutex_);
    SY_CHECK(!stopping_) << "Submit on a stopping ThreadPool";
    queue_.push_back(std::move(packaged));
  }
  cv_.notify_one();
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
  std::vector<std::future<void>> helpers;
  helpers.reserve(static_cast<size_t>(chunks - 1));
  for (int64_t i = 1; i < chunks; ++i) helpers.push_back(Submit(run_ranges));
  bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;
  run_ranges();
  t_inside_pool_task = was_inside;
  for (auto& f : helpers) f.get();
}

}  // namespace sy
