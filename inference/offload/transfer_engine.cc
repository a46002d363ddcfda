#include "inference/offload/transfer_engine.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "runtime/core/check.h"

namespace sy::offload {
namespace {

Status CancelledStatus(ExpertKey key) {
  return FailedPreconditionError("the transfer of " + key.ToString() +
                                 " was cancelled; enqueue it again");
}

}  // namespace

TransferEngine::TransferEngine(Backend& backend, HostExpertSource& source, DeviceExpertCache& cache)
    : backend_(backend), source_(source), cache_(cache), copy_stream_(backend.CreateStream()) {
  const ExpertLayout& a = source.layout();
  const ExpertLayout& b = cache.layout();
  SY_CHECK(a.num_layers == b.num_layers && a.num_experts == b.num_experts && a.hidden == b.hidden &&
           a.intermediate == b.intermediate && a.dtype == b.dtype)
      << "TransferEngine: the host source and the device cache have different expert layouts";
  worker_ = std::thread([this] { WorkLoop(); });
}

TransferEngine::~TransferEngine() {
  std::vector<std::shared_ptr<Task>> dropped;
  {
    MutexLock lock(&mutex_);
    stopping_ = true;
    for (auto& entry : tasks_.Clear()) dropped.push_back(CancelDetachedLocked(entry.value));
  }
  work_cv_.NotifyAll();
  dropped.clear();
  worker_.join();
}

std::shared_ptr<TransferEngine::Task> TransferEngine::DetachLocked(std::shared_ptr<Task> task) {
  const auto* queued = tasks_.Find(task->key);
  SY_CHECK(queued != nullptr && queued->value == task)
      << "TransferEngine: the unfinished task of " << task->key.ToString() << " is not queued";
  (void)tasks_.Cancel(task->key);
  return task;
}

std::shared_ptr<TransferEngine::Task> TransferEngine::CancelDetachedLocked(
    std::shared_ptr<Task> task) {
  task->cancelled = true;
  ++stats_.tasks_cancelled;
  // A chunk in flight still lands, but in a slot that has already left the cache (the task's pin
  // keeps it from being reused until the worker is done with it).
  cache_.AbortFill(task->pin.slot(), CancelledStatus(task->key));
  return task;
}

Result<SlotHandle> TransferEngine::Enqueue(TransferPriority priority, ExpertKey key) {
  if (!cache_.layout().Contains(key)) {
    return InvalidArgumentError("TransferEngine::Enqueue: " + key.ToString() +
                                " is outside the layout");
  }
  MutexLock lock(&mutex_);
  SY_ASSIGN_OR_RETURN(DeviceExpertCache::Acquired acquired, cache_.Acquire(key));
  if (!acquired.needs_fill) {
    ++stats_.hits;
    // An unfinished task of a hit is queued: a HIGH request promotes it from LOW.
    if (tasks_.Find(key) != nullptr &&
        tasks_.Push(priority, key, nullptr) == decltype(tasks_)::PushResult::kPromoted) {
      ++stats_.promoted;
    }
    return std::move(acquired.handle);
  }
  auto task = std::make_shared<Task>();
  task->key = key;
  task->pin = acquired.handle.Duplicate();
  SY_CHECK(tasks_.Push(priority, key, task) == decltype(tasks_)::PushResult::kQueued)
      << "TransferEngine: a miss on " << key.ToString() << " while its fill is queued";
  ++stats_.tasks_queued;
  work_cv_.NotifyOne();
  return std::move(acquired.handle);
}

void TransferEngine::WorkLoop() {
  const size_t chunk_bytes = cache_.layout().chunk_bytes();
  for (;;) {
    std::shared_ptr<Task> task;
    int index = 0;
    {
      MutexLock lock(&mutex_);
      while (!stopping_ && tasks_.empty()) work_cv_.Wait(&mutex_);
      if (tasks_.empty()) return;
      // The front task stays queued while its chunks are copied, so a HIGH task queued meanwhile
      // goes first after the chunk in flight.
      task = tasks_.Front()->value;
      task->in_flight = true;
      busy_ = true;
      index = task->next_chunk++;
    }
    const ExpertChunk chunk = kExpertChunks[index];
    const int slot = task->pin.slot();
    Status status;
    if (index == 0) {
      Result<HostExpert> host = source_.Get(task->key);
      if (host.ok()) {
        task->host = std::move(host).value();
      } else {
        status =
            host.status().WithContext("reading " + task->key.ToString() + " from the host tier");
      }
    }
    if (status.ok()) {
      if (index == 0) backend_.StreamWaitEvent(*copy_stream_, cache_.last_use_event(slot));
      Event& event = cache_.chunk_event(slot, chunk);
      backend_.CopyAsync(task->host.chunk(chunk), cache_.chunk(slot, chunk), *copy_stream_);
      backend_.RecordEvent(event, *copy_stream_);
      event.Synchronize();
    }
    std::shared_ptr<Task> finished;
    {
      MutexLock lock(&mutex_);
      task->in_flight = false;
      busy_ = false;
      if (status.ok()) {
        stats_.bytes_host_to_device += chunk_bytes;
        ++stats_.chunks_copied;
      }
      if (task->cancelled) {
        finished = task;
      } else if (!status.ok()) {
        ++stats_.tasks_failed;
        finished = DetachLocked(task);
        cache_.AbortFill(slot, status);
      } else {
        cache_.MarkChunkReady(slot, chunk);
        if (task->next_chunk == kNumExpertChunks) {
          ++stats_.tasks_completed;
          finished = DetachLocked(task);
        }
      }
      if (tasks_.empty()) idle_cv_.NotifyAll();
    }
    // `finished` (and `task`) drop the engine's pin here, outside the lock.
  }
}

Status TransferEngine::Wait(const SlotHandle& handle) {
  const auto start = std::chrono::steady_clock::now();
  Status status = cache_.WaitReady(handle);
  const auto waited = std::chrono::steady_clock::now() - start;
  {
    MutexLock lock(&mutex_);
    ++stats_.waits;
    stats_.stall_ns +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
  }
  SY_RETURN_IF_ERROR(status);
  for (ExpertChunk c : kExpertChunks) {
    backend_.StreamWaitEvent(backend_.compute_stream(), cache_.chunk_event(handle.slot(), c));
  }
  return Status::Ok();
}

Result<SlotHandle> TransferEngine::Wait(ExpertKey key) {
  SlotHandle handle = cache_.Pin(key);
  if (!handle.valid()) {
    return NotFoundError("TransferEngine::Wait: " + key.ToString() +
                         " is neither in the device cache nor queued; Enqueue it first");
  }
  SY_RETURN_IF_ERROR(Wait(handle));
  return handle;
}

bool TransferEngine::Cancel(ExpertKey key) {
  std::shared_ptr<Task> dropped;
  {
    MutexLock lock(&mutex_);
    auto entry = tasks_.Cancel(key);
    if (!entry.has_value()) return false;
    dropped = CancelDetachedLocked(std::move(entry->value));
    if (tasks_.empty()) idle_cv_.NotifyAll();
  }
  return true;
}

int TransferEngine::CancelLow(int layer) {
  std::vector<std::shared_ptr<Task>> dropped;
  {
    MutexLock lock(&mutex_);
    auto victims = tasks_.CancelLow([layer](const ExpertKey& key, const std::shared_ptr<Task>&) {
      return layer < 0 || key.layer == static_cast<uint32_t>(layer);
    });
    for (auto& entry : victims) dropped.push_back(CancelDetachedLocked(std::move(entry.value)));
    if (tasks_.empty()) idle_cv_.NotifyAll();
  }
  return static_cast<int>(dropped.size());
}

void TransferEngine::Drain() {
  MutexLock lock(&mutex_);
  while (!tasks_.empty() || busy_) idle_cv_.Wait(&mutex_);
}

TransferStats TransferEngine::stats() const {
  MutexLock lock(&mutex_);
  return stats_;
}

}  // namespace sy::offload
