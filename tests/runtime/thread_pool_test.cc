// ThreadPool: ParallelFor coverage, its body called in place (never copied), region accounting,
// nesting without deadlock, Submit.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/core/thread_pool.h"

namespace sy {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) {
      for (int64_t grain : {int64_t{1}, int64_t{16}, int64_t{5000}}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> calls{0};
        pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
          ASSERT_LE(0, begin);
          ASSERT_LT(begin, end);
          ASSERT_LE(end, n);
          ++calls;
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
              << "threads " << threads << " n " << n << " grain " << grain << " index " << i;
        }
        if (n > 0) {
          EXPECT_LE(calls.load(), (n + grain - 1) / grain);
        }
      }
    }
  }
}

TEST(ThreadPool, ParallelForUsesSeveralThreads) {
  ThreadPool pool(4);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  std::atomic<int> inside{0};
  pool.ParallelFor(4, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    }
    // Hold each range until all four have started, so they must be on different threads.
    ++inside;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (inside.load() < 4 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  });
  EXPECT_GE(ids.size(), 2u);
}

// A loop body that counts its copies (it has no move constructor, so a move counts too): the pool
// must call the caller's object itself on every thread. std::function would copy it, onto the
// heap at this size.
class CopyCountingBody {
 public:
  CopyCountingBody(std::vector<std::atomic<int>>* hits, std::atomic<int>* copies)
      : hits_(hits), copies_(copies) {}
  CopyCountingBody(const CopyCountingBody& other)
      : hits_(other.hits_), copies_(other.copies_), padding_(other.padding_) {
    ++*copies_;
  }
  CopyCountingBody& operator=(const CopyCountingBody&) = delete;
  void operator()(int64_t begin, int64_t end) const {
    for (int64_t i = begin; i < end; ++i) (*hits_)[static_cast<size_t>(i)]++;
  }

 private:
  std::vector<std::atomic<int>>* hits_;
  std::atomic<int>* copies_;
  std::array<char, 64> padding_{};  // beyond any small-buffer optimization
};

TEST(ThreadPool, ParallelForCallsItsBodyWithoutCopyingIt) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(1000);
    std::atomic<int> copies{0};
    const CopyCountingBody body(&hits, &copies);
    for (int round = 0; round < 20; ++round) pool.ParallelFor(1000, 1, body);
    EXPECT_EQ(copies.load(), 0) << threads << " threads";
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 20) << "index " << i;
  }
}

TEST(ThreadPool, RegionCountsCoverTheCallerAndTheWorkers) {
  ThreadPool pool(2);
  // Both ranges wait until both have started, so the worker surely joined, then hold 2 ms more.
  auto two_ranges = [&pool] {
    std::atomic<int> inside{0};
    pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
      ++inside;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (inside.load() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
  };
  two_ranges();  // not counted: counting is off
  EXPECT_EQ(pool.region_counts().regions, 0);

  pool.set_count_regions(true);
  const ThreadPool::RegionCounts before = pool.region_counts();
  two_ranges();
  two_ranges();
  pool.ParallelFor(1, 1, [](int64_t, int64_t) {});  // one range runs inline: not a region
  const ThreadPool::RegionCounts counts = pool.region_counts() - before;
  pool.set_count_regions(false);
  EXPECT_EQ(counts.regions, 2);
  EXPECT_EQ(counts.joins, 2);
  constexpr int64_t kFourMs = 4'000'000;
  EXPECT_GE(counts.region_ns, kFourMs);
  EXPECT_GE(counts.worker_busy_ns, kFourMs);
  EXPECT_LE(counts.worker_busy_ns, counts.region_ns);  // joined after opening, left before closing
  EXPECT_GE(counts.join_delay_ns, 0);
  EXPECT_LE(counts.join_delay_ns + counts.worker_busy_ns, counts.region_ns);

  two_ranges();  // off again
  EXPECT_EQ((pool.region_counts() - before).regions, 2);
}

TEST(ThreadPool, NestedParallelForDoesNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto done = std::async(std::launch::async, [&] {
    pool.ParallelFor(8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        pool.ParallelFor(100, 1, [&](int64_t ib, int64_t ie) { total += ie - ib; });
      }
    });
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "nested ParallelFor deadlocked";
  EXPECT_EQ(total.load(), 800);
}

// Several threads call ParallelFor on one pool at once: one of them holds the open region, the
// others hand their helpers to the task queue, and every loop still covers each index once. Many
// short loops back to back, as a decode step runs them, with workers joining and leaving regions.
TEST(ThreadPool, ConcurrentParallelForsFromSeveralThreads) {
  ThreadPool pool(3);
  constexpr int kCallers = 4, kLoops = 300;
  constexpr int64_t kN = 257;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&] {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(kN));
      for (int loop = 0; loop < kLoops; ++loop) {
        for (auto& h : hits) h.store(0, std::memory_order_relaxed);
        pool.ParallelFor(kN, 8, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (const auto& h : hits) {
          if (h.load() != 1) ++failures;
        }
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

// A loop whose workers cannot join (they are busy in long tasks) is run by the caller alone, and
// returns without waiting for them.
TEST(ThreadPool, ParallelForDoesNotWaitForBusyWorkers) {
  ThreadPool pool(2);
  std::atomic<bool> release{false};
  auto busy = pool.Submit([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker is inside the task
  std::atomic<int64_t> total{0};
  auto loop = std::async(std::launch::async, [&] {
    pool.ParallelFor(1000, 10, [&](int64_t b, int64_t e) { total += e - b; });
  });
  const auto status = loop.wait_for(std::chrono::seconds(30));
  release = true;  // lets a ParallelFor that waited for the worker finish, so the test ends
  loop.get();
  busy.get();
  EXPECT_EQ(status, std::future_status::ready) << "ParallelFor waited for a busy worker";
  EXPECT_EQ(total.load(), 1000);
}

TEST(ThreadPool, SubmitRunsTasksAndReturnsFutures) {
  ThreadPool pool(3);
  std::atomic<int> count{0};
  std::vector<std::future<void>> futures;
  for (int i = 0; i < 50; ++i) futures.push_back(pool.Submit([&] { ++count; }));
  for (auto& f : futures) f.get();
  EXPECT_EQ(count.load(), 50);
  // A ParallelFor inside a submitted task runs inline rather than waiting on busy workers.
  std::atomic<int64_t> inner{0};
  pool.Submit([&] { pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) { inner += e - b; }); })
      .get();
  EXPECT_EQ(inner.load(), 64);
}

TEST(ThreadPool, SingleThreadPoolRunsSubmitInline) {
  ThreadPool pool(1);
  bool ran = false;
  auto f = pool.Submit([&] { ran = true; });
  EXPECT_TRUE(ran);
  f.get();
}

TEST(ThreadPool, DestructorFinishesQueuedTasks) {
  std::atomic<int> count{0};
  {
    ThreadPool pool(2);
    for (int i = 0; i < 20; ++i) {
      (void)pool.Submit([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ++count;
      });
    }
  }
  EXPECT_EQ(count.load(), 20);
}

TEST(ThreadPool, DefaultNumThreadsIsPositive) { EXPECT_GE(ThreadPool::DefaultNumThreads(), 1); }

}  // namespace
}  // namespace sy
