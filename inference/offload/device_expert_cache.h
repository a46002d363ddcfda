// DeviceExpertCache: a fixed number of expert slots in device memory, allocated once at Create,
// with a readiness state and an event per chunk (ProMoE's ready_chunk; docs/offload.md).
//
// - A slot holds one expert's three chunks (inference/offload/expert_layout.h). A fill never
//   allocates: slots are carved from device tensors taken from the backend at Create.
// - Acquire(key) is one policy access. A hit pins the slot that holds (or is being filled with)
//   the expert. A miss claims a free slot, or evicts the policy's victim among the slots nobody
//   pins, assigns it to the expert with no chunk ready, and tells the caller to fill it
//   (Acquired::needs_fill); the TransferEngine does that.
// - Policies (DeviceCachePolicy):
//     kLru     victim = least recently accessed unpinned entry.
//     kLfu     victim = unpinned entry with the fewest accesses since it came in (a new entry
//              counts 1), the least recently accessed among equals.
//     kLifo    victim = the unpinned entry that came in last (Pre-gated MoE's LIFO variant: the
//              experts that came first stay, the newest one is replaced).
//     kLayerLru ProMoE's per-layer LRU: MoE layer m owns a share of the slots, num_slots /
//              num_layers (the first num_slots % num_layers layers one more). A miss of layer m
//              takes, in order: the least recently accessed unpinned entry of layer m when m holds
//              its share or more; a free slot; the least recently accessed unpinned entry of a
//              layer holding more than its share; that of any layer.
//     kStatic  the experts in DeviceExpertCacheOptions::static_experts (most popular first,
//              from an offline profile, as Fiddler) own the first slots for good and are never
//              evicted; the other slots are scratch, as under kNone.
//     kNone    no caching: an entry leaves its slot as soon as its last pin is released, so
//              every access to an unpinned expert misses.
// - Pins (SlotHandle): a pinned slot is never evicted. Whoever copies into a slot or computes
//   with it holds a pin for as long as it does. Releasing a pin records the slot's last-use event
//   on the backend's compute stream; a fill waits for that event on its copy stream before
//   writing, so a copy never overwrites weights a queued kernel still reads.
// - Readiness: the filler calls MarkChunkReady after a chunk's copy has completed (its event has
//   been reached), so ChunkReady true means the data is in place. AbortFill (a cancelled or
//   failed fill) drops the entry: its waiters get the reason, and the slot is freed when its last
//   pin goes (a static slot keeps its expert, empty).
//
// Ownership: the cache owns its slots and events and borrows the backend, which must outlive it.
// Every SlotHandle must be released before the cache is destroyed (checked).
// Thread-safety: every method may be called from any thread; slot state is under one mutex (the
// events and the device memory of the slots are fixed at Create and read without it).
// WaitReady blocks the calling thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "inference/offload/expert_layout.h"
#include "runtime/backend/backend.h"
#include "runtime/core/mutex.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy::offload {

enum class DeviceCachePolicy : uint8_t { kLru, kLfu, kLifo, kLayerLru, kStatic, kNone };
// "lru", "lfu", "lifo", "layer-lru", "static", "none"
const char* DeviceCachePolicyName(DeviceCachePolicy policy);
// The policy DeviceCachePolicyName spells `name`; InvalidArgument naming the valid ones.
Result<DeviceCachePolicy> ParseDeviceCachePolicy(std::string_view name);

struct DeviceExpertCacheOptions {
  int num_slots = 0;                                   // Required, >= 1
  DeviceCachePolicy policy = DeviceCachePolicy::kLru;  // Default: LRU
  // kStatic only: the experts that own slots for good, most popular first. The first
  // min(size, num_slots) are kept. Default: none.
  std::vector<ExpertKey> static_experts;
};

struct DeviceCacheStats {
  uint64_t hits = 0;       // Acquire found the expert in a slot (ready or filling)
  uint64_t misses = 0;     // Acquire assigned a slot to it
  uint64_t evictions = 0;  // of those misses, the ones that displaced another expert
  uint64_t aborted_fills = 0;
};

class DeviceExpertCache;

// A pin on one slot. Move-only; released on destruction. Valid handles come from
// DeviceExpertCache (Acquire, Pin, Duplicate).
class SlotHandle {
 public:
  SlotHandle() = default;
  ~SlotHandle() { Release(); }
  SlotHandle(SlotHandle&& other) noexcept { *this = std::move(other); }
  SlotHandle& operator=(SlotHandle&& other) noexcept;
  SlotHandle(const SlotHandle&) = delete;
  SlotHandle& operator=(const SlotHandle&) = delete;

  bool valid() const { return cache_ != nullptr; }
  int slot() const { return slot_; }
  ExpertKey key() const { return key_; }
  // Another pin on the same slot.
  SlotHandle Duplicate() const;
  void Release();

 private:
  friend class DeviceExpertCache;
  DeviceExpertCache* cache_ = nullptr;
  int slot_ = -1;
  ExpertKey key_;
};

class DeviceExpertCache {
 public:
  // Allocates options.num_slots slots of layout.expert_bytes() on `backend` (ResourceExhausted
  // past the device budget) and one event per chunk per slot. InvalidArgument for a bad layout,
  // num_slots < 1, or a static expert outside the layout.
  static Result<std::unique_ptr<DeviceExpertCache>> Create(Backend& backend,
                                                           const ExpertLayout& layout,
                                                           const DeviceExpertCacheOptions& options);
  ~DeviceExpertCache();
  DeviceExpertCache(const DeviceExpertCache&) = delete;
  DeviceExpertCache& operator=(const DeviceExpertCache&) = delete;

  struct Acquired {
    SlotHandle handle;        // pins the slot
    bool needs_fill = false;  // the caller must fill the slot (and MarkChunkReady each chunk)
    std::optional<ExpertKey> evicted;  // the expert this miss displaced
  };
  // One policy access of `key` (see the top). ResourceExhausted when the expert is not resident
  // and every slot it could take is pinned.
  Result<Acquired> Acquire(ExpertKey key) SY_EXCLUDES(mutex_);
  // Pins the slot holding `key` (ready, filling or empty-static) without a policy access; an
  // invalid handle when no slot holds it.
  SlotHandle Pin(ExpertKey key) SY_EXCLUDES(mutex_);
  // The slot holding `key`, or -1. No pin, no policy access.
  int Lookup(ExpertKey key) const SY_EXCLUDES(mutex_);

  // ---- readiness ----
  bool ChunkReady(int slot, ExpertChunk c) const SY_EXCLUDES(mutex_);
  bool Ready(int slot) const SY_EXCLUDES(mutex_);  // every chunk ready
  // Blocks until every chunk of the handle's slot is ready (OK), or until its fill is aborted or
  // it has none and none is coming (the abort reason, or FailedPrecondition).
  Status WaitReady(const SlotHandle& handle) SY_EXCLUDES(mutex_);
  // For the filler (TransferEngine), which holds a pin: chunk `c` of `slot` has landed.
  void MarkChunkReady(int slot, ExpertChunk c) SY_EXCLUDES(mutex_);
  // For the filler: the fill of `slot` stops; the expert leaves the cache (see the top).
  void AbortFill(int slot, const Status& reason) SY_EXCLUDES(mutex_);

  // ---- device memory and events of a slot (stable for the cache's lifetime) ----
  Tensor chunk(int slot, ExpertChunk c) const;  // device view, layout().ChunkShape(c)
  Event& chunk_event(int slot, ExpertChunk c);  // recorded on the copy stream after the chunk
  Event& last_use_event(int slot);              // recorded when a pin is released

  const ExpertLayout& layout() const { return layout_; }
  const DeviceExpertCacheOptions& options() const { return options_; }
  int num_slots() const { return options_.num_slots; }
  DeviceCacheStats stats() const SY_EXCLUDES(mutex_);
  // The experts that own a slot now (ready, filling or empty-static), in slot order.
  std::vector<ExpertKey> Resident() const SY_EXCLUDES(mutex_);

 private:
  enum class SlotState : uint8_t {
    kFree,     // no expert
    kEmpty,    // assigned, nothing copied and no fill under way (a static slot before its fill)
    kFilling,  // assigned, a fill is under way
    kFilled,   // every chunk ready
  };
  struct Slot {
    SlotState state = SlotState::kFree;
    ExpertKey key;
    bool is_static = false;
    bool detached = false;  // aborted while pinned: freed at the last unpin
    int pins = 0;
    uint8_t ready_mask = 0;
    uint64_t last_access = 0;  // policy tick of the last access
    uint64_t came_in = 0;      // policy tick of the miss that brought the expert in
    uint64_t accesses = 0;     // accesses since the expert came in
    Status abort_reason;
  };
  struct SlotEvents {
    std::unique_ptr<Event> chunks[kNumExpertChunks];
    std::unique_ptr<Event> last_use;
  };

  DeviceExpertCache(Backend& backend, const ExpertLayout& layout,
                    const DeviceExpertCacheOptions& options);
  SlotHandle PinLocked(int slot) SY_REQUIRES(mutex_);
  void Unpin(int slot) SY_EXCLUDES(mutex_);
  // The slot a miss of `key` takes: a free one (lowest index), else the policy's victim (for
  // kLayerLru, see the top); -1 if none.
  int ChooseSlotLocked(ExpertKey key) const SY_REQUIRES(mutex_);
  // The policy's victim among the unpinned filled slots that `eligible(slot)` accepts, or -1.
  template <typename Eligible>
  int VictimLocked(Eligible eligible) const SY_REQUIRES(mutex_);
  int FreeSlotLocked() const SY_REQUIRES(mutex_);  // the lowest free slot, or -1
  int LayerShare(uint32_t layer) const;            // kLayerLru: slots layer `layer` owns
  void FreeLocked(int slot) SY_REQUIRES(mutex_);
  friend class SlotHandle;

  Backend& backend_;
  ExpertLayout layout_;
  DeviceExpertCacheOptions options_;
  Tensor slab_;                     // [num_slots, chunks, I * H] on the device
  std::vector<SlotEvents> events_;  // per slot, made at Create

  mutable Mutex mutex_;
  CondVar cv_;
  std::vector<Slot> slots_ SY_GUARDED_BY(mutex_);
  std::unordered_map<ExpertKey, int, ExpertKeyHash> index_ SY_GUARDED_BY(mutex_);
  uint64_t tick_ SY_GUARDED_BY(mutex_) = 0;
  DeviceCacheStats stats_ SY_GUARDED_BY(mutex_);
};

}  // namespace sy::offload
