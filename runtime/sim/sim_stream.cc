#include "runtime/sim/sim_stream.h"

namespace sy {

void SimEvent::Synchronize() {
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    target = armed_;
  }
  WaitFor(target);
}

bool SimEvent::Query() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ >= armed_;
}

uint64_t SimEvent::Arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  return ++armed_;
}

uint64_t SimEvent::armed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return armed_;
}

void SimEvent::Complete(uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation > completed_) completed_ = generation;
  }
  cv_.notify_all();
}

void SimEvent::WaitFor(uint64_t generation) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_ >= generation; });
}

SimStream::SimStream(bool inline_execution) : inline_(inline_execution) {
  if (!inline_) worker_ = std::thread([this] { WorkerLoop(); });
}

SimStream::~SimStream() {
  if (inline_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void SimStream::Enqueue(std::function<void()> work) {
  if (inline_) {
    work();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void SimStream::Synchronize() {
  if (inline_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void SimStream::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    work();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace sy
