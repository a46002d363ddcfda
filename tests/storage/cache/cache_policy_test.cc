#include "storage/cache/cache_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <vector>

#include "storage/cache/access_trace.h"
#include "storage/cache/belady.h"
#include "storage/cache/cache_sim.h"
#include "storage/cache/lfu_policy.h"
#include "storage/cache/lru_policy.h"
#include "storage/cache/tinylfu_policy.h"
#include "storage/store/expert_key.h"

namespace sy::storage {
namespace {

const CachePolicy::Evictable kAll = [](uint64_t) { return true; };

TEST(MoESysLfuTest, FollowsAlgorithm2) {
  LfuOptions options;
  options.threshold = 2;
  options.beta = 0.5;
  options.decay_every = 2;
  MoESysLfuPolicy lfu(options);
  lfu.OnInsert(1);  // hits[1] = 1
  lfu.OnInsert(2);
  lfu.OnInsert(3);
  lfu.OnHit(1);  // 2
  lfu.OnHit(1);  // 3
  lfu.OnHit(2);  // 2
  EXPECT_DOUBLE_EQ(lfu.Count(1), 3);
  EXPECT_DOUBLE_EQ(lfu.Count(3), 1);
  // Full: the minimum among counts >= threshold (2) is key 2, not key 3 (count 1 < threshold).
  EXPECT_EQ(lfu.Evict(4, kAll), std::optional<uint64_t>(2));
  EXPECT_DOUBLE_EQ(lfu.Count(2), -1);
  lfu.OnInsert(4);
  // Every K = 2 steps all counts are multiplied by beta.
  lfu.OnStep();
  EXPECT_DOUBLE_EQ(lfu.Count(1), 3);
  lfu.OnStep();
  EXPECT_DOUBLE_EQ(lfu.Count(1), 1.5);
  EXPECT_DOUBLE_EQ(lfu.Count(3), 0.5);
  EXPECT_DOUBLE_EQ(lfu.Count(4), 0.5);
  // Now nothing reaches the threshold: the overall minimum goes (ties: most recently used, so
  // the newer key 4 rather than 3; Note [LFU ties]).
  EXPECT_EQ(lfu.Evict(5, kAll), std::optional<uint64_t>(4));
}

// Training that activates every expert each step reads them layer after layer, twice a step (the
// forward fill and the update): a cyclic scan over more keys than slots. Belady keeps a stable set
// and hits it every pass; least-recent ties would evict every key just before its reuse.
TEST(MoESysLfuTest, KeepsAStableSetOnACyclicScan) {
  AccessTrace trace;
  trace.num_layers = 4;
  trace.num_experts = 16;
  for (uint32_t step = 0; step < 40; ++step) {
    for (int pass = 0; pass < 2; ++pass) {
      for (uint32_t layer = 0; layer < trace.num_layers; ++layer) {
        for (uint32_t e = 0; e < trace.num_experts; ++e) trace.accesses.push_back({step, layer, e});
      }
    }
  }
  const uint64_t capacity = 16;  // a quarter of the keys
  const SimResult optimal = SimulateBelady(trace, capacity, /*warmup_steps=*/4);
  PolicyOptions options;  // MoESys LFU with its defaults (decay every 25 steps)
  std::unique_ptr<CachePolicy> lfu = MakeCachePolicy(options, capacity);
  const SimResult got = SimulatePolicy(*lfu, trace, capacity, /*warmup_steps=*/4);
  options.kind = PolicyKind::kLru;
  std::unique_ptr<CachePolicy> lru = MakeCachePolicy(options, capacity);
  const SimResult scan = SimulatePolicy(*lru, trace, capacity, /*warmup_steps=*/4);
  EXPECT_EQ(scan.hits, 0u) << "LRU on a scan longer than the cache";
  EXPECT_GT(optimal.hit_rate(), 0.2);
  // capacity - 1 keys hit twice per step; Belady keeps one more slot's worth.
  EXPECT_GE(got.hit_rate(), 0.9 * optimal.hit_rate())
      << "LFU " << got.hits << " Belady " << optimal.hits;
}

TEST(MoESysLfuTest, NeverEvictsWhatIsNotEvictable) {
  MoESysLfuPolicy lfu(LfuOptions{});
  lfu.OnInsert(1);
  lfu.OnInsert(2);
  lfu.OnHit(2);
  EXPECT_EQ(lfu.Evict(3, [](uint64_t k) { return k != 1; }), std::optional<uint64_t>(2));
  EXPECT_EQ(lfu.Evict(3, [](uint64_t) { return false; }), std::nullopt);
}

TEST(LruTest, EvictsLeastRecentlyUsedEvictable) {
  LruPolicy lru;
  for (uint64_t k : {1, 2, 3}) lru.OnInsert(k);
  lru.OnHit(1);
  EXPECT_EQ(lru.Evict(9, [](uint64_t k) { return k != 2; }), std::optional<uint64_t>(3));
  EXPECT_EQ(lru.Evict(9, kAll), std::optional<uint64_t>(2));
  EXPECT_EQ(lru.Evict(9, kAll), std::optional<uint64_t>(1));
  EXPECT_EQ(lru.Evict(9, kAll), std::nullopt);
}

TEST(WTinyLfuTest, FrequentKeysSurviveAScan) {
  constexpr size_t kCapacity = 100;
  WTinyLfuPolicy policy(kCapacity);
  std::set<uint64_t> resident;
  auto access = [&](uint64_t key) {
    if (resident.count(key)) {
      policy.OnHit(key);
      return true;
    }
    if (resident.size() >= kCapacity) {
      std::optional<uint64_t> victim = policy.Evict(key, kAll);
      EXPECT_TRUE(victim.has_value());
      EXPECT_EQ(resident.erase(*victim), 1u);
    }
    resident.insert(key);
    policy.OnInsert(key);
    return false;
  };
  // A hot set of 50 keys, each used often.
  for (int round = 0; round < 20; ++round) {
    for (uint64_t k = 0; k < 50; ++k) access(k);
  }
  // A long scan of one-off keys.
  for (uint64_t k = 1000; k < 3000; ++k) access(k);
  int hot_left = 0;
  for (uint64_t k = 0; k < 50; ++k) hot_left += resident.count(k);
  EXPECT_GE(hot_left, 45) << "W-TinyLFU should keep the hot set through a scan";
  // LRU, by contrast, loses all of it.
  LruPolicy lru;
  std::set<uint64_t> lru_resident;
  auto lru_access = [&](uint64_t key) {
    if (lru_resident.count(key)) return lru.OnHit(key);
    if (lru_resident.size() >= kCapacity) lru_resident.erase(*lru.Evict(key, kAll));
    lru_resident.insert(key);
    lru.OnInsert(key);
  };
  for (int round = 0; round < 20; ++round) {
    for (uint64_t k = 0; k < 50; ++k) lru_access(k);
  }
  for (uint64_t k = 1000; k < 3000; ++k) lru_access(k);
  int lru_hot_left = 0;
  for (uint64_t k = 0; k < 50; ++k) lru_hot_left += lru_resident.count(k);
  EXPECT_EQ(lru_hot_left, 0);
}

TEST(FrequencySketchTest, EstimatesAndForgets) {
  FrequencySketch sketch(64);
  for (int i = 0; i < 10; ++i) sketch.Increment(7);
  sketch.Increment(8);
  EXPECT_GE(sketch.Estimate(7), 10);  // a count-min sketch never underestimates before a reset
  EXPECT_GE(sketch.Estimate(8), 1);
  EXPECT_LT(sketch.Estimate(8), sketch.Estimate(7));
  for (uint64_t k = 100; k < 100 + 640; ++k) sketch.Increment(k);  // triggers halving
  EXPECT_LT(sketch.Estimate(7), 10);
}

// Exhaustive optimum for tiny traces: try every eviction choice. The independent oracle for
// Belady's MIN.
uint64_t BruteForceHits(const std::vector<uint64_t>& keys, size_t capacity, size_t i,
                        std::set<uint64_t> resident) {
  if (i == keys.size()) return 0;
  if (resident.count(keys[i])) return 1 + BruteForceHits(keys, capacity, i + 1, resident);
  if (resident.size() < capacity) {
    resident.insert(keys[i]);
    return BruteForceHits(keys, capacity, i + 1, resident);
  }
  uint64_t best = 0;
  for (uint64_t victim : std::set<uint64_t>(resident)) {
    std::set<uint64_t> next = resident;
    next.erase(victim);
    next.insert(keys[i]);
    best = std::max(best, BruteForceHits(keys, capacity, i + 1, next));
  }
  return best;
}

TEST(BeladyTest, MatchesExhaustiveSearchOnSmallTraces) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    AccessTrace trace;
    trace.num_layers = 1;
    trace.num_experts = 6;
    std::vector<uint64_t> keys;
    for (uint32_t i = 0; i < 12; ++i) {
      uint32_t expert = rng() % 6;
      trace.accesses.push_back(Access{i, 0, expert});
      keys.push_back(ExpertKey{0, expert}.Packed());
    }
    size_t capacity = 1 + rng() % 3;
    SimResult belady = SimulateBelady(trace, capacity);
    EXPECT_EQ(belady.hits, BruteForceHits(keys, capacity, 0, {})) << "trial " << trial;
  }
}

TEST(CacheSimTest, BeladyBoundsEveryPolicyAndLfuBeatsLruOnZipf) {
  ZipfTraceOptions options;
  options.num_layers = 4;
  options.num_experts = 32;
  options.steps = 600;
  options.zipf_s = 1.1;
  Result<AccessTrace> trace = GenerateZipfTrace(options);
  ASSERT_TRUE(trace.ok());
  for (uint64_t capacity : {38u, 51u, 64u}) {  // 30-50% of the 128 experts
    SimResult optimal = SimulateBelady(*trace, capacity);
    std::vector<SimResult> results;
    for (PolicyKind kind : {PolicyKind::kMoESysLfu, PolicyKind::kLru, PolicyKind::kWTinyLfu}) {
      PolicyOptions policy_options;
      policy_options.kind = kind;
      std::unique_ptr<CachePolicy> policy = MakeCachePolicy(policy_options, capacity);
      results.push_back(SimulatePolicy(*policy, *trace, capacity));
      EXPECT_LE(results.back().hits, optimal.hits) << results.back().policy;
      EXPECT_EQ(results.back().hits + results.back().misses, trace->accesses.size());
    }
    EXPECT_GT(results[0].hit_rate(), results[1].hit_rate())
        << "MoESys LFU vs LRU at capacity " << capacity;
  }
}

TEST(PolicyNamesTest, ParseAndName) {
  for (PolicyKind kind : {PolicyKind::kMoESysLfu, PolicyKind::kLru, PolicyKind::kWTinyLfu}) {
    EXPECT_EQ(*ParsePolicyKind(PolicyKindName(kind)), kind);
  }
  EXPECT_FALSE(ParsePolicyKind("fifo").ok());
}

}  // namespace
}  // namespace sy::storage
