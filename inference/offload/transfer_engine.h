// TransferEngine: moves experts from the host tier into DeviceExpertCache slots, chunk by chunk,
// on one copy worker with its own stream and a two-priority queue (ProMoE; docs/offload.md; the
// queue is storage/cache/two_priority_queue.h, shared with the expert cache's Prefetcher).
//
// - Enqueue(priority, key) is one cache access (DeviceExpertCache::Acquire). On a miss it queues
//   a task that copies the expert's three chunks (gate, up, down) host -> slot on the copy
//   stream. On a hit nothing is queued, except that a queued LOW task asked for again at HIGH
//   moves to the back of the HIGH queue.
// - The worker copies one chunk at a time and waits for it to land before it picks the next:
//   it records the chunk's event on the copy stream, synchronises it, then marks the chunk ready
//   in the cache. So the copy stream never holds more than one chunk, and a HIGH task waits at
//   most the one chunk in flight before its own copies start. Within a priority, first come first
//   served; a partly copied LOW task resumes after the HIGH queue drains.
// - Cancel(key) and CancelLow() drop tasks that have not finished (early preemption): the chunks
//   not yet started are never copied; a chunk already in flight completes, then the task is
//   dropped. A dropped task's slot is released (DeviceExpertCache::AbortFill), so its waiters get
//   FailedPrecondition and the slot's partial contents are never reported ready.
// - Wait(handle) blocks the calling thread until the expert's chunks have landed, then makes the
//   compute stream wait on their events (a no-op once they are complete, but correct on an
//   asynchronous device). The time spent blocked is the compute side's stall (stats().stall_ns).
//
// Before the first chunk of a fill the copy stream waits on the slot's last-use event, so the
// copy does not overwrite weights a queued kernel of the previous occupant still reads.
//
// Ownership: borrows the backend, the host source and the cache (all must outlive the engine);
// owns its copy stream and worker thread. The destructor drops queued tasks (as Cancel), waits
// for the chunk in flight and joins the worker.
// Thread-safety: every method may be called from any thread. Wait blocks its caller.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>

#include "inference/offload/device_expert_cache.h"
#include "inference/offload/host_experts.h"
#include "runtime/backend/backend.h"
#include "runtime/core/mutex.h"
#include "runtime/core/status.h"
#include "runtime/core/thread_annotations.h"
#include "storage/cache/two_priority_queue.h"

namespace sy::offload {

// kHigh: the gate's exact choice, needed now. kLow: a prediction or a prefetch.
using TransferPriority = storage::QueuePriority;

struct TransferStats {
  uint64_t bytes_host_to_device = 0;
  uint64_t chunks_copied = 0;
  uint64_t tasks_queued = 0;     // misses that queued a fill
  uint64_t tasks_completed = 0;  // all three chunks landed
  uint64_t tasks_cancelled = 0;  // dropped by Cancel, CancelLow or the destructor
  uint64_t tasks_failed = 0;     // the host source returned an error
  uint64_t hits = 0;             // Enqueue found the expert in the cache (ready or on its way)
  uint64_t promoted = 0;         // queued LOW tasks moved to HIGH
  uint64_t waits = 0;            // Wait calls
  uint64_t stall_ns = 0;         // time Wait blocked
};

class TransferEngine {
 public:
  TransferEngine(Backend& backend, HostExpertSource& source, DeviceExpertCache& cache);
  ~TransferEngine();
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // Brings `key` into the cache (see the top) and returns a pin on its slot for the caller,
  // which may drop it at once (the entry then stays as the cache's policy decides).
  // ResourceExhausted when every slot it could take is pinned; InvalidArgument for a key outside
  // the layout.
  Result<SlotHandle> Enqueue(TransferPriority priority, ExpertKey key) SY_EXCLUDES(mutex_);

  // Blocks until the pinned expert is ready and orders the compute stream after its copies.
  // FailedPrecondition (or the host source's error) when its fill was cancelled or failed.
  Status Wait(const SlotHandle& handle) SY_EXCLUDES(mutex_);
  // Pins `key` and waits as above. NotFound when it is neither in the cache nor queued.
  Result<SlotHandle> Wait(ExpertKey key) SY_EXCLUDES(mutex_);

  // Drops the unfinished task of `key`; false when there is none.
  bool Cancel(ExpertKey key) SY_EXCLUDES(mutex_);
  // Drops every unfinished LOW task (of MoE layer `layer`, or of every layer when layer < 0);
  // returns how many.
  int CancelLow(int layer = -1) SY_EXCLUDES(mutex_);
  // Blocks until no task is queued or in flight.
  void Drain() SY_EXCLUDES(mutex_);

  TransferStats stats() const SY_EXCLUDES(mutex_);

 private:
  // A task's mutable fields are read and written under the engine's mutex_ (the analysis cannot
  // name another object's mutex, so they carry no annotation); `host` belongs to the worker.
  struct Task {
    ExpertKey key;
    SlotHandle pin;          // the engine's own pin, held until the task ends
    int next_chunk = 0;      // chunks started so far
    bool in_flight = false;  // the worker is copying one of its chunks
    bool cancelled = false;
    HostExpert host;  // fetched before the first chunk
  };

  void WorkLoop() SY_EXCLUDES(mutex_);
  // Removes `task` from the queue; the caller ends it (pins released outside the lock by dropping
  // the returned task).
  std::shared_ptr<Task> DetachLocked(std::shared_ptr<Task> task) SY_REQUIRES(mutex_);
  // Drops `task`, already out of the queue (mutex_ held). Its pin is released when the caller
  // drops the returned pointer.
  std::shared_ptr<Task> CancelDetachedLocked(std::shared_ptr<Task> task) SY_REQUIRES(mutex_);

  Backend& backend_;
  HostExpertSource& source_;
  DeviceExpertCache& cache_;
  std::unique_ptr<Stream> copy_stream_;

  mutable Mutex mutex_;
  CondVar work_cv_;  // the worker waits for tasks
  CondVar idle_cv_;  // Drain waits for the queues to empty
  // The unfinished tasks, queued or in flight (a task stays queued, at the front, while its chunks
  // are copied).
  storage::TwoPriorityQueue<ExpertKey, std::shared_ptr<Task>, ExpertKeyHash> tasks_
      SY_GUARDED_BY(mutex_);
  bool busy_ SY_GUARDED_BY(mutex_) = false;  // a chunk is in flight
  bool stopping_ SY_GUARDED_BY(mutex_) = false;
  TransferStats stats_ SY_GUARDED_BY(mutex_);
  std::thread worker_;
};

}  // namespace sy::offload
