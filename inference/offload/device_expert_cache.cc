#include "inference/offload/device_expert_cache.h"

#include <string>
#include <utility>

#include "runtime/core/check.h"

namespace sy::offload {
namespace {

constexpr uint8_t kAllChunks = (1u << kNumExpertChunks) - 1;

uint8_t Bit(ExpertChunk c) { return static_cast<uint8_t>(1u << static_cast<int>(c)); }

}  // namespace

const char* DeviceCachePolicyName(DeviceCachePolicy policy) {
  switch (policy) {
    case DeviceCachePolicy::kLru:
      return "lru";
    case DeviceCachePolicy::kLfu:
      return "lfu";
    case DeviceCachePolicy::kLifo:
      return "lifo";
    case DeviceCachePolicy::kLayerLru:
      return "layer-lru";
    case DeviceCachePolicy::kStatic:
      return "static";
    case DeviceCachePolicy::kNone:
      return "none";
  }
  return "?";
}

Result<DeviceCachePolicy> ParseDeviceCachePolicy(std::string_view name) {
  for (const DeviceCachePolicy policy :
       {DeviceCachePolicy::kLru, DeviceCachePolicy::kLfu, DeviceCachePolicy::kLifo,
        DeviceCachePolicy::kLayerLru, DeviceCachePolicy::kStatic, DeviceCachePolicy::kNone}) {
    if (name == DeviceCachePolicyName(policy)) return policy;
  }
  return InvalidArgumentError("unknown device cache policy '" + std::string(name) +
                              "'; valid: lru, lfu, lifo, layer-lru, static, none");
}

// ---- SlotHandle ----

SlotHandle& SlotHandle::operator=(SlotHandle&& other) noexcept {
  if (this != &other) {
    Release();
    cache_ = std::exchange(other.cache_, nullptr);
    slot_ = std::exchange(other.slot_, -1);
    key_ = other.key_;
  }
  return *this;
}

SlotHandle SlotHandle::Duplicate() const {
  SY_CHECK(valid()) << "Duplicate of an invalid SlotHandle";
  MutexLock lock(&cache_->mutex_);
  return cache_->PinLocked(slot_);
}

void SlotHandle::Release() {
  if (cache_ == nullptr) return;
  DeviceExpertCache* cache = std::exchange(cache_, nullptr);
  cache->Unpin(std::exchange(slot_, -1));
}

// ---- DeviceExpertCache ----

DeviceExpertCache::DeviceExpertCache(Backend& backend, const ExpertLayout& layout,
                                     const DeviceExpertCacheOptions& options)
    : backend_(backend),
      layout_(layout),
      options_(options),
      events_(options.num_slots),
      slots_(options.num_slots) {}

Result<std::unique_ptr<DeviceExpertCache>> DeviceExpertCache::Create(
    Backend& backend, const ExpertLayout& layout, const DeviceExpertCacheOptions& options) {
  SY_RETURN_IF_ERROR(layout.Validate());
  if (options.num_slots < 1) {
    return InvalidArgumentError("DeviceExpertCacheOptions.num_slots must be >= 1, got " +
                                std::to_string(options.num_slots));
  }
  for (const ExpertKey& key : options.static_experts) {
    if (!layout.Contains(key)) {
      return InvalidArgumentError("DeviceExpertCacheOptions.static_experts: " + key.ToString() +
                                  " is outside the layout");
    }
  }
  std::unique_ptr<DeviceExpertCache> cache(new DeviceExpertCache(backend, layout, options));
  SY_ASSIGN_OR_RETURN(cache->slab_,
                      backend.Allocate(layout.dtype, Shape{options.num_slots, kNumExpertChunks,
                                                           layout.chunk_numel()}));
  for (SlotEvents& events : cache->events_) {
    for (auto& event : events.chunks) event = backend.CreateEvent();
    events.last_use = backend.CreateEvent();
  }
  if (options.policy == DeviceCachePolicy::kStatic) {
    MutexLock lock(&cache->mutex_);  // nobody else sees the cache yet; the analysis asks for it
    int next = 0;
    for (const ExpertKey& key : options.static_experts) {
      if (next == options.num_slots) break;
      if (cache->index_.count(key) != 0) continue;
      Slot& slot = cache->slots_[next];
      slot.state = SlotState::kEmpty;
      slot.key = key;
      slot.is_static = true;
      cache->index_[key] = next++;
    }
  }
  return cache;
}

DeviceExpertCache::~DeviceExpertCache() {
  MutexLock lock(&mutex_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    SY_CHECK_EQ(slots_[i].pins, 0)
        << "DeviceExpertCache destroyed while slot " << i << " is pinned";
  }
}

SlotHandle DeviceExpertCache::PinLocked(int slot) {
  ++slots_[slot].pins;
  SlotHandle handle;
  handle.cache_ = this;
  handle.slot_ = slot;
  handle.key_ = slots_[slot].key;
  return handle;
}

void DeviceExpertCache::Unpin(int slot) {
  // Whoever held the pin has queued all its work on the slot by now (a compute pin holder has
  // enqueued its kernels; a filler has seen its copies complete).
  backend_.RecordEvent(*events_.at(slot).last_use, backend_.compute_stream());
  MutexLock lock(&mutex_);
  Slot& s = slots_[slot];
  SY_CHECK_GT(s.pins, 0) << "unpin of an unpinned slot " << slot;
  if (--s.pins > 0) return;
  const bool keep = (options_.policy != DeviceCachePolicy::kStatic &&
                     options_.policy != DeviceCachePolicy::kNone) ||
                    s.is_static;
  if (s.detached || (!keep && s.state != SlotState::kFree)) FreeLocked(slot);
}

void DeviceExpertCache::FreeLocked(int slot) {
  Slot& s = slots_[slot];
  SY_CHECK(!s.is_static) << "a static slot is never freed";
  if (!s.detached) {
    auto it = index_.find(s.key);
    if (it != index_.end() && it->second == slot) index_.erase(it);
  }
  s.state = SlotState::kFree;
  s.detached = false;
  s.ready_mask = 0;
  s.accesses = 0;
  s.abort_reason = Status::Ok();
}

int DeviceExpertCache::FreeSlotLocked() const {
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& s = slots_[i];
    if (s.state == SlotState::kFree && s.pins == 0 && !s.is_static && !s.detached) return i;
  }
  return -1;
}

template <typename Eligible>
int DeviceExpertCache::VictimLocked(Eligible eligible) const {
  int victim = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& s = slots_[i];
    if (s.pins > 0 || s.is_static || s.detached || s.state != SlotState::kFilled) continue;
    if (!eligible(i)) continue;
    if (victim < 0) {
      victim = i;
      continue;
    }
    const Slot& v = slots_[victim];
    bool better = false;
    switch (options_.policy) {
      case DeviceCachePolicy::kLfu:
        better =
            s.accesses < v.accesses || (s.accesses == v.accesses && s.last_access < v.last_access);
        break;
      case DeviceCachePolicy::kLifo:
        better = s.came_in > v.came_in;
        break;
      case DeviceCachePolicy::kLru:
      case DeviceCachePolicy::kLayerLru:
      case DeviceCachePolicy::kStatic:
      case DeviceCachePolicy::kNone:
        better = s.last_access < v.last_access;
        break;
    }
    if (better) victim = i;
  }
  return victim;
}

int DeviceExpertCache::LayerShare(uint32_t layer) const {
  const int layers = layout_.num_layers;
  return options_.num_slots / layers +
         (static_cast<int>(layer) < options_.num_slots % layers ? 1 : 0);
}

int DeviceExpertCache::ChooseSlotLocked(ExpertKey key) const {
  auto any = [](int) { return true; };
  if (options_.policy != DeviceCachePolicy::kLayerLru) {
    const int free = FreeSlotLocked();
    return free >= 0 ? free : VictimLocked(any);
  }
  // The lambdas read copies: the thread-safety analysis does not see mutex_ held inside them.
  std::vector<int> held(static_cast<size_t>(layout_.num_layers), 0);
  std::vector<uint32_t> layer_of(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    layer_of[i] = s.key.layer;
    if (s.state != SlotState::kFree && !s.detached) ++held[s.key.layer];
  }
  auto layer = [&](int slot) { return layer_of[static_cast<size_t>(slot)]; };
  if (held[key.layer] >= LayerShare(key.layer)) {
    const int own = VictimLocked([&](int slot) { return layer(slot) == key.layer; });
    if (own >= 0) return own;
  }
  if (const int free = FreeSlotLocked(); free >= 0) return free;
  const int over =
      VictimLocked([&](int slot) { return held[layer(slot)] > LayerShare(layer(slot)); });
  return over >= 0 ? over : VictimLocked(any);
}

Result<DeviceExpertCache::Acquired> DeviceExpertCache::Acquire(ExpertKey key) {
  if (!layout_.Contains(key)) {
    return InvalidArgumentError("DeviceExpertCache::Acquire: " + key.ToString() +
                                " is outside the layout");
  }
  MutexLock lock(&mutex_);
  ++tick_;
  Acquired acquired;
  auto it = index_.find(key);
  if (it != index_.end()) {
    Slot& s = slots_[it->second];
    ++stats_.hits;
    s.last_access = tick_;
    ++s.accesses;
    if (s.state == SlotState::kEmpty) {
      s.state = SlotState::kFilling;
      s.abort_reason = Status::Ok();
      acquired.needs_fill = true;
    }
    acquired.handle = PinLocked(it->second);
    return acquired;
  }
  const int slot = ChooseSlotLocked(key);
  if (slot < 0) {
    return ResourceExhaustedError("DeviceExpertCache: every one of the " +
                                  std::to_string(slots_.size()) + " slots is pinned; no room for " +
                                  key.ToString());
  }
  ++stats_.misses;
  Slot& s = slots_[slot];
  if (s.state != SlotState::kFree) {
    acquired.evicted = s.key;
    ++stats_.evictions;
    FreeLocked(slot);
  }
  s.state = SlotState::kFilling;
  s.key = key;
  s.ready_mask = 0;
  s.last_access = tick_;
  s.came_in = tick_;
  s.accesses = 1;
  index_[key] = slot;
  acquired.needs_fill = true;
  acquired.handle = PinLocked(slot);
  return acquired;
}

SlotHandle DeviceExpertCache::Pin(ExpertKey key) {
  MutexLock lock(&mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return SlotHandle();
  return PinLocked(it->second);
}

int DeviceExpertCache::Lookup(ExpertKey key) const {
  MutexLock lock(&mutex_);
  auto it = index_.find(key);
  return it == index_.end() ? -1 : it->second;
}

bool DeviceExpertCache::ChunkReady(int slot, ExpertChunk c) const {
  MutexLock lock(&mutex_);
  return (slots_.at(slot).ready_mask & Bit(c)) != 0;
}

bool DeviceExpertCache::Ready(int slot) const {
  MutexLock lock(&mutex_);
  return slots_.at(slot).ready_mask == kAllChunks;
}

Status DeviceExpertCache::WaitReady(const SlotHandle& handle) {
  SY_CHECK(handle.valid() && handle.cache_ == this) << "WaitReady needs a pin of this cache";
  MutexLock lock(&mutex_);
  const Slot& s = slots_[handle.slot()];
  for (;;) {
    if (s.ready_mask == kAllChunks) return Status::Ok();
    if (s.detached || s.state != SlotState::kFilling) {
      if (!s.abort_reason.ok()) return s.abort_reason;
      return FailedPreconditionError("DeviceExpertCache: no fill of " + handle.key().ToString() +
                                     " is under way; enqueue it on the transfer engine");
    }
    cv_.Wait(&mutex_);
  }
}

void DeviceExpertCache::MarkChunkReady(int slot, ExpertChunk c) {
  {
    MutexLock lock(&mutex_);
    Slot& s = slots_.at(slot);
    SY_CHECK(s.state == SlotState::kFilling && s.pins > 0 && !s.detached)
        << "MarkChunkReady on slot " << slot << " which is not being filled";
    s.ready_mask |= Bit(c);
    if (s.ready_mask == kAllChunks) s.state = SlotState::kFilled;
  }
  cv_.NotifyAll();
}

void DeviceExpertCache::AbortFill(int slot, const Status& reason) {
  SY_CHECK(!reason.ok()) << "AbortFill needs a reason";
  {
    MutexLock lock(&mutex_);
    Slot& s = slots_.at(slot);
    SY_CHECK(s.state == SlotState::kFilling && !s.detached)
        << "AbortFill on slot " << slot << " which is not being filled";
    ++stats_.aborted_fills;
    s.ready_mask = 0;
    s.abort_reason = reason;
    s.state = SlotState::kEmpty;
    if (!s.is_static) {
      index_.erase(s.key);
      s.detached = true;
      if (s.pins == 0) FreeLocked(slot);
    }
  }
  cv_.NotifyAll();
}

Tensor DeviceExpertCache::chunk(int slot, ExpertChunk c) const {
  SY_CHECK(slot >= 0 && slot < options_.num_slots) << "slot " << slot;
  return slab_.Select(slot).Select(static_cast<int64_t>(c)).Reshape(layout_.ChunkShape(c));
}

Event& DeviceExpertCache::chunk_event(int slot, ExpertChunk c) {
  return *events_.at(slot).chunks[static_cast<int>(c)];
}

Event& DeviceExpertCache::last_use_event(int slot) { return *events_.at(slot).last_use; }

DeviceCacheStats DeviceExpertCache::stats() const {
  MutexLock lock(&mutex_);
  return stats_;
}

std::vector<ExpertKey> DeviceExpertCache::Resident() const {
  MutexLock lock(&mutex_);
  std::vector<ExpertKey> keys;
  for (const Slot& s : slots_) {
    if (s.state != SlotState::kFree && !s.detached) keys.push_back(s.key);
  }
  return keys;
}

}  // namespace sy::offload
