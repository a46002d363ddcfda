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

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/backend/backend.h"

namespace sy {

class SimEvent final : public Event {
 public:
  void Synchronize() override;
  bool Query() override;

  // Arms the next generation and returns it; Complete(g) marks it reached.
  uint64_t Arm();
  void Complete(uint64_t generation);
  // The generation of the last Arm() (0 if never recorded).
  uint64_t armed();
  // Blocks until generation `g` is reached.
  void WaitFor(uint64_t generation);

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t armed_ = 0;      // guarded by mutex_
  uint64_t completed_ = 0;  // guarded by mutex_
};

class SimStream final : public Stream {
 public:
  explicit SimStream(bool inline_execution);
  ~SimStream() override;
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  // Runs `work` after everything queued before it (immediately, for an inline stream).
  void Enqueue(std::function<void()> work);
  // Blocks until all queued work has run.
  void Synchronize();

 private:
  void WorkerLoop();

  const bool inline_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool busy_ = false;                        // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  std::thread worker_;
};

}  // namespace sy
