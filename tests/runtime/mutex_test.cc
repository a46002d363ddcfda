// Mutex, MutexLock, CondVar: exclusion, unlock/relock of a scoped lock, waits that are woken and
// waits that time out.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "runtime/core/mutex.h"

namespace sy {
namespace {

// Whether another thread can take `mutex` right now (it gives it back at once).
bool FreeForAnotherThread(Mutex& mutex) {
  bool acquired = false;
  std::thread other([&] {
    if (mutex.TryLock()) {
      acquired = true;
      mutex.Unlock();
    }
  });
  other.join();
  return acquired;
}

struct Counter {
  Mutex mutex;
  CondVar cv;
  int value SY_GUARDED_BY(mutex) = 0;
};

TEST(Mutex, MutexLockExcludesOtherThreads) {
  Counter counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&counter] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&counter.mutex);
        int seen = counter.value;
        counter.value = seen + 1;  // a lost update shows up as a short count
      }
    });
  }
  for (auto& thread : threads) thread.join();
  MutexLock lock(&counter.mutex);
  EXPECT_EQ(counter.value, 40000);
}

TEST(Mutex, TryLockFailsWhileAnotherThreadHoldsIt) {
  Mutex mutex;
  MutexLock lock(&mutex);
  EXPECT_FALSE(FreeForAnotherThread(mutex));
}

TEST(Mutex, MutexLockUnlockLetsOthersInAndLockRetakes) {
  Mutex mutex;
  MutexLock lock(&mutex);
  lock.Unlock();
  EXPECT_TRUE(FreeForAnotherThread(mutex));
  lock.Lock();
  EXPECT_FALSE(FreeForAnotherThread(mutex));
}

TEST(CondVar, WaitReturnsOnceTheConditionIsSetAndNotified) {
  Counter counter;
  std::thread producer([&counter] {
    for (int i = 0; i < 5; ++i) {
      MutexLock lock(&counter.mutex);
      ++counter.value;
      counter.cv.NotifyAll();
    }
  });
  {
    MutexLock lock(&counter.mutex);
    while (counter.value < 5) counter.cv.Wait(&counter.mutex);
    EXPECT_EQ(counter.value, 5);
  }
  producer.join();
}

TEST(CondVar, WaitUntilTimesOutWithoutANotify) {
  Counter counter;
  MutexLock lock(&counter.mutex);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(20);
  bool timed_out = false;
  while (counter.value == 0 && !timed_out)
    timed_out = counter.cv.WaitUntil(&counter.mutex, deadline);
  EXPECT_TRUE(timed_out);
  EXPECT_GE(std::chrono::steady_clock::now(), deadline);
  // The mutex is held again after the wait: another thread cannot take it.
  EXPECT_FALSE(FreeForAnotherThread(counter.mutex));
}

TEST(CondVar, WaitUntilReturnsEarlyWhenNotified) {
  Counter counter;
  std::thread producer([&counter] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    MutexLock lock(&counter.mutex);
    counter.value = 1;
    counter.cv.NotifyOne();
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  {
    MutexLock lock(&counter.mutex);
    bool timed_out = false;
    while (counter.value == 0 && !timed_out)
      timed_out = counter.cv.WaitUntil(&counter.mutex, deadline);
    EXPECT_FALSE(timed_out);
    EXPECT_EQ(counter.value, 1);
  }
  producer.join();
  EXPECT_LT(std::chrono::steady_clock::now(), deadline);
}

}  // namespace
}  // namespace sy
