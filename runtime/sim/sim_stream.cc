#include "runtime/sim/sim_stream.h"

namespace sy {

void SimEvent::Synchronize() {
  uint64_t target;
  {
    MutexLock lock(&mutex_);
    target = armed_;
  }
  WaitFor(target);
}

bool SimEvent::Query() {
  MutexLock lock(&mutex_);
  return completed_ >= armed_;
}

uint64_t SimEvent::Arm() {
  MutexLock lock(&mutex_);
  return ++armed_;
}

uint64_t SimEvent::armed() {
  MutexLock lock(&mutex_);
  return armed_;
}

void SimEvent::Complete(uint64_t generation) {
  // Notified under the lock: a thread that sees the generation reached (Query, WaitFor) may
  // destroy the event at once, and a notify after the unlock would then touch a destroyed
  // condition variable (ThreadSanitizer, SimBackendTest.EventsOrderStreams).
  MutexLock lock(&mutex_);
  if (generation > completed_) completed_ = generation;
  cv_.NotifyAll();
}

void SimEvent::WaitFor(uint64_t generation) {
  MutexLock lock(&mutex_);
  while (completed_ < generation) cv_.Wait(&mutex_);
}

SimStream::SimStream(bool inline_execution) : inline_(inline_execution) {
  if (!inline_) worker_ = std::thread([this] { WorkerLoop(); });
}

SimStream::~SimStream() {
  if (inline_) return;
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  worker_.join();
}

void SimStream::Enqueue(std::function<void()> work) {
  if (inline_) {
    work();
    return;
  }
  {
    MutexLock lock(&mutex_);
    queue_.push_back(std::move(work));
  }
  cv_.NotifyAll();
}

void SimStream::Synchronize() {
  if (inline_) return;
  MutexLock lock(&mutex_);
  while (!queue_.empty() || busy_) cv_.Wait(&mutex_);
}

void SimStream::WorkerLoop() {
  MutexLock lock(&mutex_);
  for (;;) {
    while (!stopping_ && queue_.empty()) cv_.Wait(&mutex_);
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.Unlock();
    work();
    lock.Lock();
    busy_ = false;
    cv_.NotifyAll();
  }
}

}  // namespace sy
