// Mutex, MutexLock, CondVar, SharedMutex: std::mutex, std::condition_variable and
// std::shared_mutex with the thread-safety attributes of runtime/core/thread_annotations.h, so that
// clang checks every SY_GUARDED_BY member (scripts/check-thread-safety.sh). libstdc++'s mutexes
// carry no attributes.
//
//   mutable Mutex mutex_;
//   int count_ SY_GUARDED_BY(mutex_) = 0;
//   CondVar cv_;
//
//   void Add() SY_EXCLUDES(mutex_) {
//     MutexLock lock(&mutex_);
//     ++count_;
//     cv_.NotifyAll();
//   }
//   void AwaitPositive() SY_EXCLUDES(mutex_) {
//     MutexLock lock(&mutex_);
//     while (count_ <= 0) cv_.Wait(&mutex_);  // the condition is read under the lock
//   }
//
// CondVar waits take no predicate: a predicate lambda is a separate function to the analysis and
// holds no lock there, so the condition is written as the loop above (abseil's CondVar does the
// same).
//
// Thread-safety: as the std types they wrap. None of them is copyable or movable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "runtime/core/thread_annotations.h"

namespace sy {

class SY_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() SY_ACQUIRE() { mu_.lock(); }
  void Unlock() SY_RELEASE() { mu_.unlock(); }
  bool TryLock() SY_TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction. Unlock() and Lock() release and retake it in
// between (for work outside the lock); the destructor unlocks only if it is held.
class SY_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) SY_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() SY_RELEASE() {
    if (locked_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() SY_RELEASE() {
    mu_->Unlock();
    locked_ = false;
  }
  void Lock() SY_ACQUIRE() {
    mu_->Lock();
    locked_ = true;
  }

 private:
  Mutex* mu_;
  bool locked_ = true;
};

// A condition variable waited on with a held Mutex.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases *mu, sleeps until notified (or woken spuriously), and retakes *mu before returning.
  // Callers loop on their condition.
  void Wait(Mutex* mu) SY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // *mu stays held; the caller's MutexLock owns it
  }

  // As Wait, until `deadline` at the latest; returns true if it returned because the deadline
  // passed (the caller's condition may still have become true: check it).
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline)
      SY_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }

  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A reader-writer mutex: writers (WriterMutexLock) hold it alone, readers (ReaderMutexLock) share
// it. A member it guards is read with either hold and written only with the exclusive one.
class SY_CAPABILITY("mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() SY_ACQUIRE() { mu_.lock(); }
  void Unlock() SY_RELEASE() { mu_.unlock(); }
  void LockShared() SY_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() SY_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex exclusively from construction to destruction.
class SY_SCOPED_CAPABILITY WriterMutexLock {
 public:
  explicit WriterMutexLock(SharedMutex* mu) SY_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterMutexLock() SY_RELEASE() { mu_->Unlock(); }
  WriterMutexLock(const WriterMutexLock&) = delete;
  WriterMutexLock& operator=(const WriterMutexLock&) = delete;

 private:
  SharedMutex* mu_;
};

// Holds a SharedMutex shared from construction to destruction; Unlock() and Lock() release and
// retake the shared hold in between, as MutexLock's do.
class SY_SCOPED_CAPABILITY ReaderMutexLock {
 public:
  explicit ReaderMutexLock(SharedMutex* mu) SY_ACQUIRE_SHARED(mu) : mu_(mu) { mu_->LockShared(); }
  ~ReaderMutexLock() SY_RELEASE() {
    if (locked_) mu_->UnlockShared();
  }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

  void Unlock() SY_RELEASE() {
    mu_->UnlockShared();
    locked_ = false;
  }
  void Lock() SY_ACQUIRE_SHARED() {
    mu_->LockShared();
    locked_ = true;
  }

 private:
  SharedMutex* mu_;
  bool locked_ = true;
};

}  // namespace sy
