// ExpertCache: the CPU cache of expert states in front of an ExpertStore (MoESys Algorithm 2).
//
// - Fixed host slots, allocated once at Create through a HostSlotAllocator (see Note [pinned
//   slots] in storage/cache/host_slot_allocator.h); a fetch never allocates. Each slot holds one
//   extent of the cache's kind (its stride: payload rounded up to 4 KiB, so I/O is direct).
// - A miss with a free slot fetches from the store. A miss when full asks the policy (MoESys LFU
//   by default; LRU and W-TinyLFU behind the same interface) for a victim, writes the victim back
//   first when it is dirty, and reuses its slot. Every K steps the LFU counts decay by beta.
// - Dirty entries are also written back every `update_cycle` steps (Step) and by Flush, as one
//   batch (one durable publish in the store), and one at a time, without waiting, by WriteBack
//   (write-behind: an entry its user is done with for the step goes to the store while the user
//   works on the next one; concurrent write-backs share a publish). Step and Flush wait for the
//   write-backs in flight, so after them the store's durable generation holds every entry.
// - Acquire returns a CacheHandle that pins its entry: a pinned entry is never evicted, and an
//   entry held for writing is not written back until released. Entries are pinned while a copy or
//   a kernel uses them; a handle may be moved to another thread (e.g. a copy stream's callback).
//
// Failures: a store read error fails the Acquire that waited for it (the slot is freed); a failed
// write-back of a victim fails the Acquire that needed the slot and leaves the victim cached and
// dirty; a failed periodic write-back leaves the entries dirty. In every case the store stays at
// its previous generation (storage/store/expert_store.h).
//
// Ownership: the cache borrows the store (which must outlive it) and owns its slots. Handles must
// be released before the cache is destroyed. The destructor does not write back: call Flush().
// Thread-safety: every method may be called from any thread. The policy runs under the cache's
// mutex; store I/O runs outside it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/core/buffer.h"
#include "runtime/core/mutex.h"
#include "storage/cache/cache_policy.h"
#include "storage/cache/host_slot_allocator.h"
#include "storage/store/expert_key.h"
#include "storage/store/expert_store.h"

namespace sy::storage {

enum class AccessMode : uint8_t {
  kRead,   // the holder only reads the slot
  kWrite,  // the holder updates the state (an optimizer step): the entry becomes dirty
};

struct CacheOptions {
  size_t num_slots = 0;                       // Required, >= 1.
  ExtentKind kind = ExtentKind::kTrainState;  // Default: training state (master | m | v).
  PolicyOptions policy;                       // Default: MoESys LFU (threshold 0, beta .5, K 25).
  // Write back every dirty entry every this many Step() calls; 0 only on eviction and Flush.
  // Default: 0.
  int64_t update_cycle = 0;
  // How long Acquire waits for a slot when every slot is pinned or busy. Default: 60000 ms.
  int64_t acquire_timeout_ms = 60000;
  // Where the slots come from. Default: DefaultHostSlotAllocator().
  HostSlotAllocator* allocator = nullptr;
  // Register the slots with the store's file system (io_uring fixed buffers). Default: true.
  bool register_buffers = true;
};

struct CacheStats {
  uint64_t hits = 0;    // Acquire found the entry resident or already on its way
  uint64_t misses = 0;  // Acquire had to fetch it
  uint64_t evictions = 0;
  uint64_t write_backs = 0;  // extents written back (eviction, update cycle, Flush)
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t stall_ns = 0;  // time Acquire spent waiting (fetch, write-back, no free slot)
  uint64_t prefetches_started = 0;
  uint64_t prefetches_dropped = 0;  // no evictable slot
  uint64_t load_failures = 0;
  uint64_t write_back_failures = 0;
  // Overlap of store reads with the cache's users (Note [read overlap] in expert_cache.cc):
  uint64_t read_busy_ns = 0;     // wall time with at least one store read in flight
  uint64_t read_exposed_ns = 0;  // of it, time with an Acquire blocked at the same time
  // Wall time with at least one write-back in flight (eviction, WriteBack, Step, Flush), until
  // its publish is durable.
  uint64_t write_busy_ns = 0;
};

class ExpertCache;

// A pin on one cache entry. Move-only; releases on destruction.
class CacheHandle {
 public:
  CacheHandle() = default;
  ~CacheHandle() { Release(); }
  CacheHandle(CacheHandle&& other) noexcept;
  CacheHandle& operator=(CacheHandle&& other) noexcept;
  CacheHandle(const CacheHandle&) = delete;
  CacheHandle& operator=(const CacheHandle&) = delete;

  bool valid() const { return cache_ != nullptr; }
  ExpertKey key() const { return key_; }
  AccessMode mode() const { return mode_; }
  // The extent's payload (the parts, back to back).
  std::span<std::byte> data() const { return {data_, payload_}; }
  // The whole slot (payload plus padding to 4 KiB).
  std::span<std::byte> slot() const { return {data_, stride_}; }
  void Release();

 private:
  friend class ExpertCache;
  ExpertCache* cache_ = nullptr;
  int slot_index_ = -1;
  AccessMode mode_ = AccessMode::kRead;
  ExpertKey key_;
  std::byte* data_ = nullptr;
  size_t payload_ = 0;
  size_t stride_ = 0;
};

class ExpertCache {
 public:
  static Result<std::unique_ptr<ExpertCache>> Create(ExpertStore* store,
                                                     const CacheOptions& options);
  ~ExpertCache();
  ExpertCache(const ExpertCache&) = delete;
  ExpertCache& operator=(const ExpertCache&) = delete;

  // Returns the entry pinned, fetching it (and evicting) when needed; blocks until it is
  // resident. One policy access.
  Result<CacheHandle> Acquire(ExpertKey key, AccessMode mode = AccessMode::kRead)
      SY_EXCLUDES(mutex_);

  // Starts bringing `key` in without waiting for the data: true when a fetch started, false when
  // it was already resident or on its way. Blocks only to write back a dirty victim. Fails with
  // ResourceExhausted when no slot can be freed (the prefetch is dropped). A started prefetch is
  // the entry's policy access; the Acquire that later consumes it does not count again.
  // `max_victim_count`: when the cache is full, evict only an entry whose policy count
  // (CachePolicy::Count) is at most this, so a fetch ahead of need never displaces an entry used
  // more than the newcomer it brings (count 1); infinity: any entry the policy picks.
  Result<bool> Prefetch(ExpertKey key,
                        double max_victim_count = std::numeric_limits<double>::infinity())
      SY_EXCLUDES(mutex_);

  // Split loads (ExpertStore::SplitReads). The caller holds the first prefix.bytes of `key`'s
  // current version in the store (read by ExpertStore::ReadPrefixAsync); `fill` copies them into
  // a slot. Until the offer is withdrawn or used, the next load of `key` (Acquire or Prefetch)
  // fills those bytes with `fill` and reads only the rest, which verifies the whole extent's
  // checksum. The offer is used at most once. `fill` runs under the cache's mutex on the loading
  // thread, so what it reads must stay valid until WithdrawPrefix returns. A key is offered only
  // while Absent (the store holds its newest state).
  void OfferPrefix(ExpertKey key, const ExpertStore::ExtentPrefix& prefix,
                   std::function<void(std::span<std::byte>)> fill) SY_EXCLUDES(mutex_);
  // Withdraws `key`'s offer: true when it was still there (no load used it).
  bool WithdrawPrefix(ExpertKey key) SY_EXCLUDES(mutex_);
  // Keeps a Prefetch from evicting `key` (its user still needs it this step) until Unprotect or
  // ClearProtected; an Acquire's own eviction ignores it. May name a key not resident.
  void Protect(ExpertKey key) SY_EXCLUDES(mutex_);
  void Unprotect(ExpertKey key) SY_EXCLUDES(mutex_);
  void ClearProtected() SY_EXCLUDES(mutex_);
  // Not resident, not loading and not being written back: the store holds its newest state.
  bool Absent(ExpertKey key) const SY_EXCLUDES(mutex_);

  // Pins `key` if it is resident or on its way (waiting for it to land), without a policy access
  // and without fetching: NotFound when it is neither. For moving an entry one hop further.
  Result<CacheHandle> PinResident(ExpertKey key, AccessMode mode = AccessMode::kRead)
      SY_EXCLUDES(mutex_);

  // Starts writing `key` back without waiting, when it is resident, dirty, not held for writing
  // and not already being written: true when a write started. Until its publish is durable the
  // entry can be read (kRead) but not evicted, and a kWrite Acquire waits. A failure leaves it
  // dirty and is returned by the next Step or Flush.
  bool WriteBack(ExpertKey key) SY_EXCLUDES(mutex_);
  // Ends a step: LFU decay bookkeeping, and a write-back of dirty entries every update_cycle.
  // `failed`, when given, gets the key of the first failure (as Flush).
  Status Step(ExpertKey* failed = nullptr) SY_EXCLUDES(mutex_);
  // Waits for the write-backs in flight (WriteBack), then writes back every dirty entry not held
  // for writing, as one batch. Returns the first failure of either; `failed`, when given, gets
  // the key of the entry it concerns.
  Status Flush(ExpertKey* failed = nullptr) SY_EXCLUDES(mutex_);

  bool Contains(ExpertKey key) const SY_EXCLUDES(mutex_);  // resident and ready
  size_t num_slots() const { return options_.num_slots; }
  size_t slot_bytes() const { return kind_.stride; }
  size_t payload_bytes() const { return kind_.payload_bytes; }
  CacheStats stats() const SY_EXCLUDES(mutex_);

 private:
  enum class SlotState : uint8_t { kFree, kLoading, kReady, kFailed };
  struct Slot {
    SlotState state = SlotState::kFree;
    ExpertKey key;
    std::byte* data = nullptr;
    int pins = 0;
    int writers = 0;
    int waiters = 0;
    bool dirty = false;
    bool flushing = false;
    bool prefetched = false;  // fetched by Prefetch and not yet acquired
    uint64_t read_bytes = 0;  // of its load (the rest only, after an offered prefix)
    Status status;            // the load error, in kFailed
  };
  using Clock = std::chrono::steady_clock;

  ExpertCache(ExpertStore* store, const CacheOptions& options, KindInfo kind,
              std::shared_ptr<Buffer> slab);
  // Claims a slot for `key` (evicting, writing a dirty victim back) and starts its load
  // (*started = true). OK with *started = false when someone else brought `key` in meanwhile.
  // With `loading_index`, the caller is registered as a waiter of the slot it returns there.
  // Releases mutex_ for I/O and takes it again before returning.
  // `max_victim_count` as Prefetch's.
  Status BringInLocked(ExpertKey key, bool blocking, bool prefetch, Clock::time_point deadline,
                       bool* started, int* loading_index,
                       double max_victim_count = std::numeric_limits<double>::infinity())
      SY_REQUIRES(mutex_);
  // Starts the store read of slot `index` for `key`, whole or, with `prefix`, the rest only
  // (retried whole if the store's version moved on). Called without mutex_.
  void StartLoad(int index, ExpertKey key, std::optional<ExpertStore::ExtentPrefix> prefix)
      SY_EXCLUDES(mutex_);
  // Waits, as a waiter of slot `index`, until it no longer loads `key`. The load's error when it
  // failed; OK otherwise (the caller looks `key` up again). `registered`: already a waiter.
  Status AwaitLoadLocked(int index, ExpertKey key, Clock::time_point deadline, bool registered)
      SY_REQUIRES(mutex_);
  void OnLoaded(int index, ExpertKey key, Status status) SY_EXCLUDES(mutex_);
  // A WriteBack's publish finished (store committer thread).
  void OnWrittenBack(int index, Status status) SY_EXCLUDES(mutex_);
  // A write-back of `slot` ended with `status` (WriteBack's or Flush's): the slot is no longer
  // flushing, clean on success, and the stats count it. Returns the failure with the expert named.
  Status FinishWriteBackLocked(Slot& slot, Status status) SY_REQUIRES(mutex_);
  // Adds the time since the last call to read_busy_ns / read_exposed_ns / write_busy_ns; call
  // before changing reads_in_flight_, writes_in_flight_ or acquires_blocked_.
  void TickOverlapLocked() SY_REQUIRES(mutex_);
  void FreeSlotLocked(int index) SY_REQUIRES(mutex_);
  bool EvictableLocked(uint64_t key) const SY_REQUIRES(mutex_);
  CacheHandle MakeHandleLocked(int index, AccessMode mode) SY_REQUIRES(mutex_);
  void Release(int index, AccessMode mode) SY_EXCLUDES(mutex_);
  // Waits on cv_ (releasing mutex_) until notified or `deadline`; DeadlineExceeded at the deadline.
  Status WaitLocked(Clock::time_point deadline, const std::string& what) SY_REQUIRES(mutex_);
  friend class CacheHandle;

  ExpertStore* store_;
  CacheOptions options_;
  KindInfo kind_;
  std::shared_ptr<Buffer> slab_;
  bool registered_ = false;

  mutable Mutex mutex_;
  CondVar cv_;
  std::vector<Slot> slots_ SY_GUARDED_BY(mutex_);
  std::vector<int> free_slots_ SY_GUARDED_BY(mutex_);
  std::unordered_map<uint64_t, int> index_ SY_GUARDED_BY(mutex_);  // key -> slot
  // Evicted, not yet durable: key -> slot.
  std::unordered_map<uint64_t, int> writing_back_ SY_GUARDED_BY(mutex_);
  struct Offer {
    ExpertStore::ExtentPrefix prefix;
    std::function<void(std::span<std::byte>)> fill;
  };
  std::unordered_map<uint64_t, Offer> offers_ SY_GUARDED_BY(mutex_);  // OfferPrefix
  std::unordered_set<uint64_t> protected_ SY_GUARDED_BY(mutex_);      // Protect
  std::unique_ptr<CachePolicy> policy_ SY_GUARDED_BY(mutex_);
  int64_t steps_ SY_GUARDED_BY(mutex_) = 0;
  int loads_in_flight_ SY_GUARDED_BY(mutex_) = 0;
  int reads_in_flight_ SY_GUARDED_BY(mutex_) = 0;        // store reads issued, not yet landed
  int writes_in_flight_ SY_GUARDED_BY(mutex_) = 0;       // write-backs issued, not yet durable
  int write_behind_ SY_GUARDED_BY(mutex_) = 0;           // of them, WriteBack's
  Status write_behind_failure_ SY_GUARDED_BY(mutex_);    // the first, until Step or Flush
  ExpertKey write_behind_failed_ SY_GUARDED_BY(mutex_);  // its entry
  int acquires_blocked_ SY_GUARDED_BY(mutex_) = 0;       // Acquire calls in progress
  Clock::time_point overlap_tick_ SY_GUARDED_BY(mutex_);
  CacheStats stats_ SY_GUARDED_BY(mutex_);
};

}  // namespace sy::storage
