#include "storage/cache/expert_cache.h"

#include <algorithm>
#include <future>
#include <utility>

#include <spdlog/spdlog.h>

#include "runtime/core/check.h"

namespace sy::storage {

// ---- CacheHandle ----

CacheHandle::CacheHandle(CacheHandle&& other) noexcept { *this = std::move(other); }

CacheHandle& CacheHandle::operator=(CacheHandle&& other) noexcept {
  if (this != &other) {
    Release();
    cache_ = std::exchange(other.cache_, nullptr);
    slot_index_ = std::exchange(other.slot_index_, -1);
    mode_ = other.mode_;
    key_ = other.key_;
    data_ = other.data_;
    payload_ = other.payload_;
    stride_ = other.stride_;
  }
  return *this;
}

void CacheHandle::Release() {
  if (cache_ == nullptr) return;
  cache_->Release(slot_index_, mode_);
  cache_ = nullptr;
  slot_index_ = -1;
}

// ---- ExpertCache ----

// Note [read overlap]
// How much of the store's read time the cache's users did not wait through is measured as two
// wall-clock integrals, updated at every change of two counters under the cache's mutex: the time
// with a store read in flight (read_busy_ns), and the part of it during which some Acquire was in
// progress (read_exposed_ns). An Acquire that hits holds the mutex throughout and adds nothing; one
// that waits for a read, a write-back or a slot adds the time it waited while reads were in flight.
// A prefetch that lands before its Acquire is thus wholly hidden, a demand miss wholly exposed.

void ExpertCache::TickOverlapLocked() {
  const Clock::time_point now = Clock::now();
  const auto ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - overlap_tick_).count());
  if (reads_in_flight_ > 0) {
    stats_.read_busy_ns += ns;
    if (acquires_blocked_ > 0) stats_.read_exposed_ns += ns;
  }
  if (writes_in_flight_ > 0) stats_.write_busy_ns += ns;
  overlap_tick_ = now;
}

Result<std::unique_ptr<ExpertCache>> ExpertCache::Create(ExpertStore* store,
                                                         const CacheOptions& options) {
  if (options.num_slots == 0) {
    return InvalidArgumentError("expert cache: num_slots must be at least 1");
  }
  SY_ASSIGN_OR_RETURN(KindInfo kind, store->Kind(options.kind));
  HostSlotAllocator* allocator =
      options.allocator != nullptr ? options.allocator : DefaultHostSlotAllocator();
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(uint64_t{options.num_slots}, kind.stride, &bytes)) {
    return InvalidArgumentError("expert cache: num_slots x slot size overflows");
  }
  Result<std::shared_ptr<Buffer>> slab = allocator->Allocate(bytes);
  if (!slab.ok()) {
    return slab.status().WithContext(
        "expert cache: allocating " + std::to_string(options.num_slots) + " slots of " +
        std::to_string(kind.stride) + " bytes with " + allocator->name() + " (lower num_slots)");
  }
  return std::unique_ptr<ExpertCache>(new ExpertCache(store, options, kind, std::move(*slab)));
}

ExpertCache::ExpertCache(ExpertStore* store, const CacheOptions& options, KindInfo kind,
                         std::shared_ptr<Buffer> slab)
    : store_(store), options_(options), kind_(std::move(kind)), slab_(std::move(slab)) {
  policy_ = MakeCachePolicy(options_.policy, options_.num_slots);
  slots_.resize(options_.num_slots);
  auto* base = static_cast<std::byte*>(slab_->data());
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].data = base + i * kind_.stride;
    free_slots_.push_back(static_cast<int>(slots_.size() - 1 - i));
  }
  if (options_.register_buffers) {
    // io_uring limits one fixed buffer to 1 GiB: register the slab in slot-aligned pieces.
    size_t per_region = std::max<size_t>(1, (size_t{1} << 30) / kind_.stride);
    std::vector<iovec> regions;
    for (size_t i = 0; i < slots_.size(); i += per_region) {
      size_t n = std::min(per_region, slots_.size() - i);
      regions.push_back(iovec{slots_[i].data, n * kind_.stride});
    }
    Status status = store_->file_system()->RegisterBuffers(regions);
    if (status.ok()) {
      registered_ = true;
    } else {
      spdlog::info("expert cache: slots not registered as fixed buffers: {}", status.message());
    }
  }
}

ExpertCache::~ExpertCache() {
  MutexLock lock(&mutex_);
  while (loads_in_flight_ != 0 || !writing_back_.empty() || write_behind_ != 0) {
    cv_.Wait(&mutex_);
  }
  size_t dirty = 0;
  for (const Slot& slot : slots_) {
    SY_CHECK_EQ(slot.pins, 0) << "a CacheHandle of " << slot.key.ToString()
                              << " outlives its ExpertCache";
    if (slot.state == SlotState::kReady && slot.dirty) ++dirty;
  }
  if (dirty > 0) {
    spdlog::warn(
        "expert cache destroyed with {} dirty entries that were never written back; "
        "call Flush() first to keep them",
        dirty);
  }
  lock.Unlock();
  if (registered_) store_->file_system()->UnregisterBuffers();
}

bool ExpertCache::EvictableLocked(uint64_t key) const {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const Slot& slot = slots_[it->second];
  return slot.state == SlotState::kReady && slot.pins == 0 && !slot.flushing;
}

CacheHandle ExpertCache::MakeHandleLocked(int index, AccessMode mode) {
  Slot& slot = slots_[index];
  ++slot.pins;
  if (mode == AccessMode::kWrite) {
    ++slot.writers;
    slot.dirty = true;
  }
  CacheHandle handle;
  handle.cache_ = this;
  handle.slot_index_ = index;
  handle.mode_ = mode;
  handle.key_ = slot.key;
  handle.data_ = slot.data;
  handle.payload_ = kind_.payload_bytes;
  handle.stride_ = kind_.stride;
  return handle;
}

void ExpertCache::Release(int index, AccessMode mode) {
  MutexLock lock(&mutex_);
  Slot& slot = slots_[index];
  SY_CHECK_GT(slot.pins, 0) << "release of an unpinned cache slot";
  --slot.pins;
  if (mode == AccessMode::kWrite) --slot.writers;
  cv_.NotifyAll();
}

void ExpertCache::FreeSlotLocked(int index) {
  Slot& slot = slots_[index];
  auto it = index_.find(slot.key.Packed());
  if (it != index_.end() && it->second == index) index_.erase(it);
  std::byte* data = slot.data;
  slot = Slot{};
  slot.data = data;
  free_slots_.push_back(index);
}

Status ExpertCache::WaitLocked(Clock::time_point deadline, const std::string& what) {
  if (cv_.WaitUntil(&mutex_, deadline)) {
    return DeadlineExceededError("expert cache: waited " +
                                 std::to_string(options_.acquire_timeout_ms) + " ms for " + what +
                                 "; all " + std::to_string(slots_.size()) +
                                 " slots may be pinned: release handles or add slots");
  }
  return Status::Ok();
}

Status ExpertCache::BringInLocked(ExpertKey key, bool blocking, bool prefetch,
                                  Clock::time_point deadline, bool* started, int* loading_index,
                                  double max_victim_count) {
  *started = false;
  const uint64_t packed = key.Packed();
  int index = -1;
  std::optional<uint64_t> dirty_victim;
  while (index < 0) {
    if (index_.count(packed) > 0 || writing_back_.count(packed) > 0) return Status::Ok();
    if (!free_slots_.empty()) {
      index = free_slots_.back();
      free_slots_.pop_back();
      break;
    }
    std::optional<uint64_t> victim =
        policy_->Evict(packed, [this, prefetch, max_victim_count](uint64_t k) SY_REQUIRES(mutex_) {
          return EvictableLocked(k) && !(prefetch && protected_.count(k) > 0) &&
                 (max_victim_count == std::numeric_limits<double>::infinity() ||
                  policy_->Count(k) <= max_victim_count);
        });
    if (victim) {
      index = index_.at(*victim);
      index_.erase(*victim);
      ++stats_.evictions;
      if (slots_[index].dirty) {
        dirty_victim = *victim;
        writing_back_[*victim] = index;
      }
      break;
    }
    if (!blocking) {
      ++stats_.prefetches_dropped;
      return ResourceExhaustedError("expert cache: no evictable slot for " + key.ToString() +
                                    " (all " + std::to_string(slots_.size()) +
                                    " slots pinned or busy)");
    }
    SY_RETURN_IF_ERROR(WaitLocked(deadline, "a slot for " + key.ToString()));
  }

  Slot& slot = slots_[index];
  ExpertKey victim_key = slot.key;
  slot.state = SlotState::kLoading;
  slot.key = key;
  slot.dirty = false;
  slot.prefetched = prefetch;
  slot.status = Status::Ok();
  index_[packed] = index;
  policy_->OnInsert(packed);
  ++loads_in_flight_;

  if (dirty_victim) {
    TickOverlapLocked();
    ++writes_in_flight_;
    mutex_.Unlock();
    Result<uint64_t> written =
        store_->Write(victim_key, options_.kind, {slot.data, kind_.stride}).get();
    mutex_.Lock();
    TickOverlapLocked();
    --writes_in_flight_;
    writing_back_.erase(*dirty_victim);
    if (!written.ok()) {
      // Undo: the victim stays cached and dirty; the new key is not fetched.
      ++stats_.write_back_failures;
      --loads_in_flight_;
      index_.erase(packed);
      policy_->OnErase(packed);
      slot.key = victim_key;
      slot.state = SlotState::kReady;
      slot.dirty = true;
      slot.prefetched = false;
      index_[*dirty_victim] = index;
      policy_->OnInsert(*dirty_victim);
      cv_.NotifyAll();
      return written.status().WithContext("expert cache: write-back of evicted " +
                                          victim_key.ToString() + " (to make room for " +
                                          key.ToString() + ") failed; it stays cached and dirty");
    }
    ++stats_.write_backs;
    stats_.bytes_written += kind_.payload_bytes;
    cv_.NotifyAll();
  }
  if (prefetch) {
    ++stats_.prefetches_started;
  } else {
    ++stats_.misses;
  }
  *started = true;
  if (loading_index != nullptr) {
    // The caller waits for this load: count it before the load can finish (even inline), so a
    // failure stays in the slot for it to see.
    *loading_index = index;
    ++slot.waiters;
  }
  // An offered prefix (OfferPrefix) fills the slot's first bytes; only the rest is read.
  std::optional<ExpertStore::ExtentPrefix> prefix;
  slot.read_bytes = kind_.payload_bytes;
  if (auto offer = offers_.find(packed); offer != offers_.end()) {
    prefix = offer->second.prefix;
    offer->second.fill(std::span<std::byte>(slot.data, prefix->bytes));
    slot.read_bytes -= prefix->bytes;
    offers_.erase(offer);
  }
  TickOverlapLocked();
  ++reads_in_flight_;
  mutex_.Unlock();
  StartLoad(index, key, prefix);
  mutex_.Lock();
  return Status::Ok();
}

void ExpertCache::StartLoad(int index, ExpertKey key,
                            std::optional<ExpertStore::ExtentPrefix> prefix) {
  // The slot is loading: no one else touches its bytes or its read_bytes until OnLoaded.
  std::byte* data = nullptr;
  {
    MutexLock lock(&mutex_);
    data = slots_[index].data;
  }
  if (!prefix) {
    store_->ReadAsync(key, options_.kind, {data, kind_.stride}, [this, index, key](Status status) {
      OnLoaded(index, key, std::move(status));
    });
    return;
  }
  store_->ReadRestAsync(key, options_.kind, *prefix, {data, kind_.stride},
                        [this, index, key](Status status) {
                          if (status.code() != StatusCode::kFailedPrecondition) {
                            OnLoaded(index, key, std::move(status));
                            return;
                          }
                          // The store's version moved on since the prefix was read (not expected:
                          // an offered key is Absent, so only this cache writes it): read it whole.
                          spdlog::warn("expert cache: {}; reading it whole", status.message());
                          {
                            MutexLock lock(&mutex_);
                            slots_[index].read_bytes = kind_.payload_bytes;
                          }
                          StartLoad(index, key, std::nullopt);
                        });
}

void ExpertCache::OnLoaded(int index, ExpertKey key, Status status) {
  MutexLock lock(&mutex_);
  Slot& slot = slots_[index];
  SY_CHECK(slot.state == SlotState::kLoading && slot.key == key)
      << "cache slot " << index << " changed while loading " << key.ToString();
  --loads_in_flight_;
  TickOverlapLocked();
  --reads_in_flight_;
  if (status.ok()) {
    slot.state = SlotState::kReady;
    stats_.bytes_read += slot.read_bytes;
  } else {
    ++stats_.load_failures;
    policy_->OnErase(key.Packed());
    if (slot.waiters == 0) {
      FreeSlotLocked(index);
    } else {
      slot.state = SlotState::kFailed;
      slot.status = status.WithContext("expert cache: fetch of " + key.ToString());
    }
  }
  cv_.NotifyAll();
}

Status ExpertCache::AwaitLoadLocked(int index, ExpertKey key, Clock::time_point deadline,
                                    bool registered) {
  Slot& slot = slots_[index];
  if (!registered) ++slot.waiters;
  Status status;
  while (status.ok() && slot.state == SlotState::kLoading && slot.key == key) {
    status = WaitLocked(deadline, key.ToString() + " to load");
  }
  --slot.waiters;
  if (slot.state == SlotState::kFailed) {
    bool mine = slot.key == key;
    Status failure = slot.status;
    if (slot.waiters == 0) FreeSlotLocked(index);
    if (mine) return failure;
  }
  return status;
}

Result<CacheHandle> ExpertCache::Acquire(ExpertKey key, AccessMode mode) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::milliseconds(options_.acquire_timeout_ms);
  const uint64_t packed = key.Packed();
  MutexLock lock(&mutex_);
  TickOverlapLocked();
  ++acquires_blocked_;
  bool counted = false;
  bool waited = false;
  auto finish = [&](Result<CacheHandle> result) SY_REQUIRES(mutex_) {
    TickOverlapLocked();
    --acquires_blocked_;
    if (waited) {
      stats_.stall_ns += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
    }
    return result;
  };
  for (;;) {
    auto it = index_.find(packed);
    if (it == index_.end()) {
      waited = true;
      if (writing_back_.count(packed) > 0) {
        // Its newest state is on its way to the store; fetch it once that is durable.
        Status status = WaitLocked(deadline, "the write-back of " + key.ToString());
        if (!status.ok()) return finish(status);
        continue;
      }
      bool started = false;
      int index = -1;
      Status status =
          BringInLocked(key, /*blocking=*/true, /*prefetch=*/false, deadline, &started, &index);
      if (!status.ok()) return finish(status);
      if (started) {
        counted = true;  // this call's own fetch: counted as a miss
        status = AwaitLoadLocked(index, key, deadline, /*registered=*/true);
        if (!status.ok()) return finish(status);
      }
      continue;
    }
    int index = it->second;
    Slot& slot = slots_[index];
    if (!counted && slot.state != SlotState::kFailed) {
      counted = true;
      ++stats_.hits;
      if (slot.prefetched) {
        slot.prefetched = false;
      } else {
        policy_->OnHit(packed);
      }
    }
    if (slot.state == SlotState::kReady && !(mode == AccessMode::kWrite && slot.flushing)) {
      return finish(MakeHandleLocked(index, mode));
    }
    if (slot.state == SlotState::kFailed) {
      Status failure = slot.status;
      if (slot.waiters == 0) FreeSlotLocked(index);
      return finish(failure);
    }
    waited = true;
    Status status = slot.state == SlotState::kLoading
                        ? AwaitLoadLocked(index, key, deadline, /*registered=*/false)
                        : WaitLocked(deadline, "the write-back of " + key.ToString());
    if (!status.ok()) return finish(status);
  }
}

Result<bool> ExpertCache::Prefetch(ExpertKey key, double max_victim_count) {
  MutexLock lock(&mutex_);
  const uint64_t packed = key.Packed();
  if (index_.count(packed) > 0 || writing_back_.count(packed) > 0) return false;
  bool started = false;
  Status status = BringInLocked(key, /*blocking=*/false, /*prefetch=*/true, Clock::now(), &started,
                                /*loading_index=*/nullptr, max_victim_count);
  if (!status.ok()) return status;
  return started;
}

void ExpertCache::OfferPrefix(ExpertKey key, const ExpertStore::ExtentPrefix& prefix,
                              std::function<void(std::span<std::byte>)> fill) {
  SY_CHECK(prefix.bytes > 0 && prefix.bytes < kind_.payload_bytes)
      << "prefix of " << prefix.bytes << " bytes offered for " << key.ToString();
  SY_CHECK(store_->SplitReads()) << "prefix offered to a cache whose store cannot split reads";
  MutexLock lock(&mutex_);
  offers_[key.Packed()] = Offer{prefix, std::move(fill)};
}

bool ExpertCache::WithdrawPrefix(ExpertKey key) {
  MutexLock lock(&mutex_);
  return offers_.erase(key.Packed()) > 0;
}

void ExpertCache::Protect(ExpertKey key) {
  MutexLock lock(&mutex_);
  protected_.insert(key.Packed());
}

void ExpertCache::Unprotect(ExpertKey key) {
  MutexLock lock(&mutex_);
  protected_.erase(key.Packed());
}

void ExpertCache::ClearProtected() {
  MutexLock lock(&mutex_);
  protected_.clear();
}

bool ExpertCache::Absent(ExpertKey key) const {
  MutexLock lock(&mutex_);
  return index_.count(key.Packed()) == 0 && writing_back_.count(key.Packed()) == 0;
}

Result<CacheHandle> ExpertCache::PinResident(ExpertKey key, AccessMode mode) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(options_.acquire_timeout_ms);
  MutexLock lock(&mutex_);
  for (;;) {
    auto it = index_.find(key.Packed());
    if (it == index_.end()) {
      return NotFoundError("expert cache: " + key.ToString() + " is not resident");
    }
    int index = it->second;
    Slot& slot = slots_[index];
    if (slot.state == SlotState::kReady && !(mode == AccessMode::kWrite && slot.flushing)) {
      return MakeHandleLocked(index, mode);
    }
    if (slot.state == SlotState::kFailed) {
      Status failure = slot.status;
      if (slot.waiters == 0) FreeSlotLocked(index);
      return failure;
    }
    Status status = slot.state == SlotState::kLoading
                        ? AwaitLoadLocked(index, key, deadline, /*registered=*/false)
                        : WaitLocked(deadline, "the write-back of " + key.ToString());
    SY_RETURN_IF_ERROR(status);
  }
}

bool ExpertCache::WriteBack(ExpertKey key) {
  int index = -1;
  std::byte* data = nullptr;
  {
    MutexLock lock(&mutex_);
    auto it = index_.find(key.Packed());
    if (it == index_.end()) return false;
    Slot& slot = slots_[it->second];
    if (slot.state != SlotState::kReady || !slot.dirty || slot.writers > 0 || slot.flushing) {
      return false;
    }
    index = it->second;
    data = slot.data;
    slot.flushing = true;
    TickOverlapLocked();
    ++writes_in_flight_;
    ++write_behind_;
  }
  // The slot's bytes stay put while it is flushing: no writer, no eviction.
  store_->WriteAsync(key, options_.kind, {data, kind_.stride},
                     [this, index](Result<uint64_t> written) {
                       OnWrittenBack(index, written.ok() ? Status::Ok() : written.status());
                     });
  return true;
}

void ExpertCache::OnWrittenBack(int index, Status status) {
  MutexLock lock(&mutex_);
  Slot& slot = slots_[index];
  TickOverlapLocked();
  --writes_in_flight_;
  --write_behind_;
  Status failure = FinishWriteBackLocked(slot, std::move(status));
  if (!failure.ok() && write_behind_failure_.ok()) {
    write_behind_failed_ = slot.key;
    write_behind_failure_ = std::move(failure);
  }
  cv_.NotifyAll();
}

Status ExpertCache::FinishWriteBackLocked(Slot& slot, Status status) {
  slot.flushing = false;
  if (status.ok()) {
    slot.dirty = false;
    ++stats_.write_backs;
    stats_.bytes_written += kind_.payload_bytes;
    return Status::Ok();
  }
  ++stats_.write_back_failures;
  return status.WithContext("expert cache: write-back of " + slot.key.ToString() +
                            " failed; it stays cached and dirty");
}

Status ExpertCache::Step(ExpertKey* failed) {
  bool flush = false;
  {
    MutexLock lock(&mutex_);
    ++steps_;
    policy_->OnStep();
    flush = options_.update_cycle > 0 && steps_ % options_.update_cycle == 0;
  }
  return flush ? Flush(failed) : Status::Ok();
}

Status ExpertCache::Flush(ExpertKey* failed) {
  std::vector<int> chosen;
  std::vector<ExpertStore::WriteRequest> requests;
  Status first;
  {
    MutexLock lock(&mutex_);
    while (write_behind_ != 0) cv_.Wait(&mutex_);
    first = std::exchange(write_behind_failure_, Status::Ok());
    if (!first.ok() && failed != nullptr) *failed = write_behind_failed_;
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.state != SlotState::kReady || !slot.dirty || slot.writers > 0 || slot.flushing) {
        continue;
      }
      slot.flushing = true;
      chosen.push_back(static_cast<int>(i));
      requests.push_back(ExpertStore::WriteRequest{
          slot.key, options_.kind, std::span<const std::byte>(slot.data, kind_.stride)});
    }
    if (!chosen.empty()) {
      TickOverlapLocked();
      writes_in_flight_ += static_cast<int>(chosen.size());
    }
  }
  if (chosen.empty()) return first;
  // The callbacks run on the store's committer thread and may outlive this frame's locals by a
  // few instructions, so everything they touch is shared.
  struct Batch {
    explicit Batch(size_t n) : results(n), remaining(n) {}
    Mutex mutex;
    CondVar cv;
    std::vector<Status> results SY_GUARDED_BY(mutex);
    size_t remaining SY_GUARDED_BY(mutex);
  };
  auto batch = std::make_shared<Batch>(chosen.size());
  store_->WriteBatch(requests, [batch](size_t i, Result<uint64_t> result) {
    MutexLock batch_lock(&batch->mutex);
    batch->results[i] = result.ok() ? Status::Ok() : result.status();
    if (--batch->remaining == 0) batch->cv.NotifyAll();
  });
  std::vector<Status> results;
  {
    MutexLock batch_lock(&batch->mutex);
    while (batch->remaining != 0) batch->cv.Wait(&batch->mutex);
    results = batch->results;
  }

  MutexLock lock(&mutex_);
  TickOverlapLocked();
  writes_in_flight_ -= static_cast<int>(chosen.size());
  for (size_t i = 0; i < chosen.size(); ++i) {
    Slot& slot = slots_[chosen[i]];
    Status failure = FinishWriteBackLocked(slot, results[i]);
    if (!failure.ok() && first.ok()) {
      first = std::move(failure);
      if (failed != nullptr) *failed = slot.key;
    }
  }
  cv_.NotifyAll();
  return first;
}

bool ExpertCache::Contains(ExpertKey key) const {
  MutexLock lock(&mutex_);
  auto it = index_.find(key.Packed());
  return it != index_.end() && slots_[it->second].state == SlotState::kReady;
}

CacheStats ExpertCache::stats() const {
  MutexLock lock(&mutex_);
  CacheStats stats = stats_;
  // The open interval, up to now.
  const auto ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - overlap_tick_).count());
  if (reads_in_flight_ > 0) {
    stats.read_busy_ns += ns;
    if (acquires_blocked_ > 0) stats.read_exposed_ns += ns;
  }
  if (writes_in_flight_ > 0) stats.write_busy_ns += ns;
  return stats;
}

}  // namespace sy::storage
