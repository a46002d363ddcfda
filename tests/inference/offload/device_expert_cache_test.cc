// DeviceExpertCache: eviction order of every policy against a small independent model of it on
// random access sequences with pins held across accesses; pinned slots are never evicted;
// readiness, aborted fills and slot memory that is allocated once.
#include "inference/offload/device_expert_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "runtime/backend/backend.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

ExpertLayout TinyLayout() {
  return ExpertLayout{
      .num_layers = 3, .num_experts = 6, .hidden = 8, .intermediate = 4, .dtype = DType::kF32};
}

std::unique_ptr<Backend> Cpu() { return std::move(CreateBackend(Device::Cpu()).value()); }

// The policy as a map from expert to (last access, accesses, pins), written from the policy's
// definition (device_expert_cache.h), not from the cache's code.
class PolicyModel {
 public:
  PolicyModel(DeviceCachePolicy policy, int capacity, std::vector<uint64_t> statics, int num_layers)
      : policy_(policy), capacity_(capacity), num_layers_(num_layers) {
    for (uint64_t k : statics) {
      if (static_cast<int>(statics_.size()) == capacity) break;
      statics_.insert(k);
      entries_[k] = Entry{};
    }
  }
  struct Outcome {
    bool exhausted = false;
    bool hit = false;
    bool needs_fill = false;  // a miss, or the first access of a static expert
    std::optional<uint64_t> evicted;
  };
  Outcome Access(uint64_t key) {
    ++tick_;
    Outcome out;
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      out.hit = true;
      out.needs_fill = !it->second.filled;
      it->second.filled = true;
      it->second.last = tick_;
      ++it->second.count;
      ++it->second.pins;
      return out;
    }
    std::optional<uint64_t> victim;
    if (policy_ == DeviceCachePolicy::kLayerLru) {
      // Layer m's own LRU entry when m holds its share, else a free slot, else the LRU entry of
      // a layer over its share, else any.
      const uint64_t layer = key >> 32;
      if (Held(layer) >= Share(layer)) {
        victim = Victim([&](uint64_t k) { return (k >> 32) == layer; });
      }
      if (!victim && static_cast<int>(entries_.size()) < capacity_) victim = kFreeSlot;
      if (!victim) victim = Victim([&](uint64_t k) { return Held(k >> 32) > Share(k >> 32); });
    } else if (static_cast<int>(entries_.size()) < capacity_) {
      victim = kFreeSlot;
    }
    if (!victim) victim = Victim([](uint64_t) { return true; });
    if (!victim) {
      --tick_;
      out.exhausted = true;
      return out;
    }
    if (*victim != kFreeSlot) {
      entries_.erase(*victim);
      out.evicted = *victim;
    }
    entries_[key] = Entry{.last = tick_, .came_in = tick_, .count = 1, .pins = 1, .filled = true};
    out.needs_fill = true;
    return out;
  }
  void Release(uint64_t key) {
    Entry& e = entries_.at(key);
    if (--e.pins == 0 && !statics_.count(key) &&
        (policy_ == DeviceCachePolicy::kNone || policy_ == DeviceCachePolicy::kStatic)) {
      entries_.erase(key);
    }
  }

 private:
  static constexpr uint64_t kFreeSlot = ~uint64_t{0};
  struct Entry {
    uint64_t last = 0;
    uint64_t came_in = 0;
    uint64_t count = 0;
    int pins = 0;
    bool filled = false;
  };
  bool Before(const Entry& a, const Entry& b) const {
    if (policy_ == DeviceCachePolicy::kLifo) return a.came_in > b.came_in;
    if (policy_ == DeviceCachePolicy::kLfu && a.count != b.count) return a.count < b.count;
    return a.last < b.last;
  }
  // The policy's first choice among unpinned, non-static entries that `eligible` accepts.
  template <typename Eligible>
  std::optional<uint64_t> Victim(Eligible eligible) {
    std::optional<uint64_t> victim;
    for (const auto& [k, e] : entries_) {
      if (e.pins > 0 || statics_.count(k) || !eligible(k)) continue;
      if (!victim || Before(e, entries_[*victim])) victim = k;
    }
    return victim;
  }
  int Held(uint64_t layer) const {
    int n = 0;
    for (const auto& [k, e] : entries_) n += (k >> 32) == layer ? 1 : 0;
    return n;
  }
  int Share(uint64_t layer) const {
    return capacity_ / num_layers_ + (static_cast<int>(layer) < capacity_ % num_layers_ ? 1 : 0);
  }
  DeviceCachePolicy policy_;
  int capacity_;
  int num_layers_;
  std::set<uint64_t> statics_;
  std::map<uint64_t, Entry> entries_;
  uint64_t tick_ = 0;
};

void FillNow(DeviceExpertCache& cache, int slot) {
  for (ExpertChunk c : kExpertChunks) cache.MarkChunkReady(slot, c);
}

void RunRandomSequence(DeviceCachePolicy policy, uint32_t seed) {
  SCOPED_TRACE(std::string(DeviceCachePolicyName(policy)) + " seed " + std::to_string(seed));
  auto backend = Cpu();
  const ExpertLayout layout = TinyLayout();
  const int capacity = 4;
  std::mt19937 rng(seed);
  std::vector<ExpertKey> statics;
  if (policy == DeviceCachePolicy::kStatic) statics = {{0, 1}, {2, 3}, {0, 1}, {1, 5}};
  std::vector<uint64_t> static_packed;
  for (ExpertKey k : statics) static_packed.push_back(k.Packed());
  auto cache =
      DeviceExpertCache::Create(
          *backend, layout, {.num_slots = capacity, .policy = policy, .static_experts = statics})
          .value();
  PolicyModel model(policy, capacity, static_packed, layout.num_layers);
  // A skewed distribution, so LFU and LRU differ.
  std::vector<double> weights;
  for (int i = 0; i < layout.num_layers * layout.num_experts; ++i) weights.push_back(1.0 / (1 + i));
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::vector<SlotHandle> held;
  int hits = 0, misses = 0, evictions = 0, exhausted = 0;
  for (int step = 0; step < 3000; ++step) {
    if (!held.empty() && (rng() % 3 == 0 || held.size() >= 5)) {
      size_t i = rng() % held.size();
      model.Release(held[i].key().Packed());
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    const int id = pick(rng);
    const ExpertKey key{static_cast<uint32_t>(id / layout.num_experts),
                        static_cast<uint32_t>(id % layout.num_experts)};
    PolicyModel::Outcome expected = model.Access(key.Packed());
    Result<DeviceExpertCache::Acquired> got = cache->Acquire(key);
    if (expected.exhausted) {
      ASSERT_FALSE(got.ok()) << "step " << step << ": the model has every slot pinned";
      EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted);
      ++exhausted;
      continue;
    }
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status().ToString();
    DeviceExpertCache::Acquired a = std::move(got).value();
    EXPECT_EQ(a.needs_fill, expected.needs_fill) << "step " << step;
    ASSERT_EQ(a.evicted.has_value(), expected.evicted.has_value()) << "step " << step;
    if (a.evicted) {
      EXPECT_EQ(a.evicted->Packed(), *expected.evicted) << "step " << step;
      for (const SlotHandle& h : held) {
        EXPECT_FALSE(h.key() == *a.evicted) << "step " << step << ": evicted a pinned expert";
      }
      ++evictions;
    }
    expected.hit ? ++hits : ++misses;
    if (a.needs_fill) FillNow(*cache, a.handle.slot());
    EXPECT_TRUE(cache->Ready(a.handle.slot()));
    EXPECT_EQ(cache->Lookup(key), a.handle.slot());
    if (rng() % 2 == 0) {
      held.push_back(std::move(a.handle));
    } else {
      a.handle.Release();
      model.Release(key.Packed());
    }
  }
  held.clear();
  const DeviceCacheStats stats = cache->stats();
  EXPECT_EQ(stats.hits, static_cast<uint64_t>(hits));
  EXPECT_EQ(stats.misses, static_cast<uint64_t>(misses));
  EXPECT_EQ(stats.evictions, static_cast<uint64_t>(evictions));
  EXPECT_GT(misses, 100);
  if (policy != DeviceCachePolicy::kStatic && policy != DeviceCachePolicy::kNone) {
    EXPECT_GT(evictions, 100);
    EXPECT_GT(hits, 100);
    EXPECT_GT(exhausted, 0) << "the sequence should sometimes pin every slot";
  } else {
    EXPECT_EQ(evictions, 0) << "static and none free a dynamic entry at its last unpin";
  }
  if (policy == DeviceCachePolicy::kNone) {
    for (ExpertKey k : cache->Resident()) ADD_FAILURE() << k.ToString() << " outlived its pins";
  }
}

TEST(DeviceExpertCacheTest, EvictionOrderMatchesAnIndependentModelOfEachPolicy) {
  for (DeviceCachePolicy policy :
       {DeviceCachePolicy::kLru, DeviceCachePolicy::kLfu, DeviceCachePolicy::kLifo,
        DeviceCachePolicy::kLayerLru, DeviceCachePolicy::kStatic, DeviceCachePolicy::kNone}) {
    for (uint32_t seed : {1u, 2u, 3u}) RunRandomSequence(policy, seed);
  }
}

// Pre-gated MoE's LIFO keeps the experts that came first and replaces the newest one; ProMoE's
// per-layer LRU evicts within the layer that holds its share, where global LRU would take another
// layer's older expert.
TEST(DeviceExpertCacheTest, LifoAndLayerLruPickTheirOwnVictimsOnHandMadeSequences) {
  auto backend = Cpu();
  auto touch = [](DeviceExpertCache& cache, ExpertKey key) {
    auto a = cache.Acquire(key).value();
    if (a.needs_fill) FillNow(cache, a.handle.slot());
    return a.evicted;
  };
  for (DeviceCachePolicy policy : {DeviceCachePolicy::kLru, DeviceCachePolicy::kLifo}) {
    auto cache = DeviceExpertCache::Create(*backend, TinyLayout(), CacheOptions(2, policy)).value();
    touch(*cache, {0, 0});
    touch(*cache, {0, 1});
    touch(*cache, {0, 0});  // 0 came in first and was used last
    std::optional<ExpertKey> evicted = touch(*cache, {0, 2});
    ASSERT_TRUE(evicted.has_value());
    EXPECT_EQ(evicted->expert, 1u) << "both drop expert 1: the least recent, and the newest";
    evicted = touch(*cache, {0, 3});  // in: 0 (first), 2 (newest, last used)
    ASSERT_TRUE(evicted.has_value());
    EXPECT_EQ(evicted->expert, policy == DeviceCachePolicy::kLru ? 0u : 2u)
        << DeviceCachePolicyName(policy);
  }
  for (DeviceCachePolicy policy : {DeviceCachePolicy::kLru, DeviceCachePolicy::kLayerLru}) {
    // 3 layers, 3 slots: one each under layer-lru.
    auto cache = DeviceExpertCache::Create(*backend, TinyLayout(), CacheOptions(3, policy)).value();
    touch(*cache, {1, 0});  // layer 1's oldest
    touch(*cache, {0, 0});
    touch(*cache, {0, 1});  // layer 0 now holds 2 (over its share of 1)
    std::optional<ExpertKey> evicted = touch(*cache, {0, 2});
    ASSERT_TRUE(evicted.has_value());
    // Global LRU drops layer 1's expert; per-layer LRU drops layer 0's own oldest.
    EXPECT_EQ(evicted->layer, policy == DeviceCachePolicy::kLru ? 1u : 0u)
        << DeviceCachePolicyName(policy);
  }
}

TEST(DeviceExpertCacheTest, LruAndLfuPickDifferentVictimsOnAHandMadeSequence) {
  auto backend = Cpu();
  for (DeviceCachePolicy policy : {DeviceCachePolicy::kLru, DeviceCachePolicy::kLfu}) {
    auto cache = DeviceExpertCache::Create(*backend, TinyLayout(), CacheOptions(2, policy)).value();
    auto touch = [&](uint32_t e) {
      auto a = cache->Acquire({0, e}).value();
      if (a.needs_fill) FillNow(*cache, a.handle.slot());
      return a.evicted;
    };
    touch(0);
    touch(0);
    touch(0);  // expert 0: three accesses
    touch(1);  // expert 1: one access, most recent
    std::optional<ExpertKey> evicted = touch(2);
    ASSERT_TRUE(evicted.has_value());
    // LRU drops the least recent (0); LFU the least frequent (1).
    EXPECT_EQ(evicted->expert, policy == DeviceCachePolicy::kLru ? 0u : 1u)
        << DeviceCachePolicyName(policy);
  }
}

TEST(DeviceExpertCacheTest, StaticExpertsKeepTheirSlotsAndNeedOneFill) {
  auto backend = Cpu();
  auto cache = DeviceExpertCache::Create(*backend, TinyLayout(),
                                         {.num_slots = 3,
                                          .policy = DeviceCachePolicy::kStatic,
                                          .static_experts = {{1, 2}, {0, 4}}})
                   .value();
  EXPECT_EQ(cache->Resident().size(), 2u);
  {
    SlotHandle pin = cache->Pin({1, 2});
    ASSERT_TRUE(pin.valid());
    // Nothing fills it yet: waiting is an error, not a hang.
    EXPECT_EQ(cache->WaitReady(pin).code(), StatusCode::kFailedPrecondition);
  }
  auto first = cache->Acquire({1, 2}).value();
  EXPECT_TRUE(first.needs_fill);
  FillNow(*cache, first.handle.slot());
  first.handle.Release();
  auto again = cache->Acquire({1, 2}).value();
  EXPECT_FALSE(again.needs_fill);
  EXPECT_TRUE(cache->Ready(again.handle.slot()));
  again.handle.Release();
  // Dynamic experts take the one scratch slot and leave it at their last unpin.
  for (uint32_t e = 0; e < 6; ++e) {
    auto a = cache->Acquire({2, e}).value();
    EXPECT_TRUE(a.needs_fill);
    EXPECT_FALSE(a.evicted.has_value());
    EXPECT_EQ(a.handle.slot(), 2);
    FillNow(*cache, a.handle.slot());
  }
  EXPECT_EQ(cache->stats().evictions, 0u);
  // With the scratch slot pinned, another dynamic expert has no room.
  auto held = cache->Acquire({2, 0}).value();
  EXPECT_EQ(cache->Acquire({2, 1}).status().code(), StatusCode::kResourceExhausted);
  FillNow(*cache, held.handle.slot());
}

TEST(DeviceExpertCacheTest, AbortedFillLeavesTheCacheAndWakesWaiters) {
  auto backend = Cpu();
  auto cache =
      DeviceExpertCache::Create(*backend, TinyLayout(), CacheOptions(2, DeviceCachePolicy::kLru))
          .value();
  auto a = cache->Acquire({0, 3}).value();
  ASSERT_TRUE(a.needs_fill);
  cache->MarkChunkReady(a.handle.slot(), ExpertChunk::kGate);
  EXPECT_TRUE(cache->ChunkReady(a.handle.slot(), ExpertChunk::kGate));
  EXPECT_FALSE(cache->Ready(a.handle.slot()));
  SlotHandle waiter = cache->Pin({0, 3});
  Status waited;
  std::thread t([&] { waited = cache->WaitReady(waiter); });
  cache->AbortFill(a.handle.slot(), FailedPreconditionError("cancelled by the test"));
  t.join();
  EXPECT_EQ(waited.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache->Lookup({0, 3}), -1);
  EXPECT_FALSE(cache->ChunkReady(a.handle.slot(), ExpertChunk::kGate));
  // Still pinned: the slot is not reused until the pins go.
  const int detached = a.handle.slot();
  auto b = cache->Acquire({0, 4}).value();
  EXPECT_NE(b.handle.slot(), detached);
  waiter.Release();
  a.handle.Release();
  FillNow(*cache, b.handle.slot());
  b.handle.Release();
  auto c = cache->Acquire({0, 5}).value();
  EXPECT_EQ(c.handle.slot(), detached) << "the freed slot comes before evicting a ready entry";
  EXPECT_FALSE(c.evicted.has_value());
  FillNow(*cache, c.handle.slot());
}

TEST(DeviceExpertCacheTest, SlotsAreAllocatedOnceFromTheDeviceBudget) {
  BackendOptions options;
  ExpertLayout layout = TinyLayout();
  layout.hidden = layout.intermediate = 256;  // 768 KiB experts
  options.sim.memory_bytes = 5 * layout.expert_bytes();
  auto sim = std::move(CreateBackend(Device::Sim(), options).value());
  auto cache =
      DeviceExpertCache::Create(*sim, layout, CacheOptions(4, DeviceCachePolicy::kLru)).value();
  const MemoryStats before = sim->memory_stats();
  EXPECT_GE(before.bytes_in_use, 4 * layout.expert_bytes());
  for (uint32_t e = 0; e < 6; ++e) {
    auto a = cache->Acquire({1, e}).value();
    FillNow(*cache, a.handle.slot());
  }
  EXPECT_EQ(sim->memory_stats().num_allocs, before.num_allocs) << "a miss never allocates";
  // More slots than the budget holds is an error, not an abort.
  auto too_many = DeviceExpertCache::Create(*sim, layout, CacheOptions(8, DeviceCachePolicy::kLru));
  EXPECT_EQ(too_many.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace sy::offload
