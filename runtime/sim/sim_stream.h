// SimStream and SimEvent: streams and events of the simulated device.
//
// A SimStream either runs work inline on the calling thread (the compute stream: the host thread
// is the device's compute engine) or on its own worker thread in FIFO order (copy streams, so a
// throttled copy overlaps with compute). A SimEvent counts recordings: Record() on a stream arms
// generation g, and the event reaches g when the stream has run everything queued before it.
//
// Ownership: streams and events are owned by their creators. A worker stream drains its queue in
// its destructor. Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "runtime/backend/backend.h"
#include "runtime/core/mutex.h"

namespace sy {

class SimEvent final : public Event {
 public:
  void Synchronize() override SY_EXCLUDES(mutex_);
  bool Query() override SY_EXCLUDES(mutex_);

  // Arms the next generation and returns it; Complete(g) marks it reached.
  uint64_t Arm() SY_EXCLUDES(mutex_);
  void Complete(uint64_t generation) SY_EXCLUDES(mutex_);
  // The generation of the last Arm() (0 if never recorded).
  uint64_t armed() SY_EXCLUDES(mutex_);
  // Blocks until generation `g` is reached.
  void WaitFor(uint64_t generation) SY_EXCLUDES(mutex_);

 private:
  Mutex mutex_;
  CondVar cv_;
  uint64_t armed_ SY_GUARDED_BY(mutex_) = 0;
  uint64_t completed_ SY_GUARDED_BY(mutex_) = 0;
};

class SimStream final : public Stream {
 public:
  explicit SimStream(bool inline_execution);
  ~SimStream() override;
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  // Runs `work` after everything queued before it (immediately, for an inline stream).
  void Enqueue(std::function<void()> work) SY_EXCLUDES(mutex_);
  // Blocks until all queued work has run.
  void Synchronize() SY_EXCLUDES(mutex_);

 private:
  void WorkerLoop() SY_EXCLUDES(mutex_);

  const bool inline_;
  Mutex mutex_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ SY_GUARDED_BY(mutex_);
  bool busy_ SY_GUARDED_BY(mutex_) = false;
  bool stopping_ SY_GUARDED_BY(mutex_) = false;
  std::thread worker_;
};

}  // namespace sy
