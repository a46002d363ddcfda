#include "storage/cache/expert_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "storage/cache/prefetcher.h"
#include "storage/fs/fault_injection_file_system.h"
#include "storage/fs/mem_file_system.h"
#include "tests/storage/test_util.h"

namespace sy::storage {
namespace {

using testing::ExpertBytes;

constexpr uint64_t kPart = 2048;
constexpr uint64_t kPayload = 3 * kPart;  // fp32 master | m | v

// A store whose every expert is written at generation 1 with ExpertBytes(l, e, 1).
class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeStore(&mem_); }

  void MakeStore(FileSystem* fs, uint32_t layers = 2, uint32_t experts = 8) {
    StoreLayout layout;
    layout.num_layers = layers;
    layout.num_experts = experts;
    layout.kinds.push_back(KindSpec{ExtentKind::kTrainState, {kPart, kPart, kPart}, -1});
    Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Create(fs, "/c/store", layout);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    for (uint32_t l = 0; l < layers; ++l) {
      for (uint32_t e = 0; e < experts; ++e) {
        std::vector<std::byte> data = ExpertBytes(l, e, 1, kPayload);
        ASSERT_TRUE(store_->Write({l, e}, ExtentKind::kTrainState, data).get().ok());
      }
    }
  }

  std::unique_ptr<ExpertCache> MakeCache(size_t slots, PolicyKind kind = PolicyKind::kMoESysLfu,
                                         int64_t update_cycle = 0) {
    CacheOptions options;
    options.num_slots = slots;
    options.policy.kind = kind;
    options.update_cycle = update_cycle;
    options.acquire_timeout_ms = 2000;
    Result<std::unique_ptr<ExpertCache>> cache = ExpertCache::Create(store_.get(), options);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    return std::move(*cache);
  }

  std::vector<std::byte> Stored(ExpertKey key) {
    std::vector<std::byte> out(kPayload);
    Status status = store_->Read(key, ExtentKind::kTrainState, out).get();
    EXPECT_TRUE(status.ok()) << status.ToString();
    return out;
  }

  static std::vector<std::byte> Bytes(const CacheHandle& handle) {
    return std::vector<std::byte>(handle.data().begin(), handle.data().end());
  }

  MemFileSystem mem_{2};
  std::unique_ptr<ExpertStore> store_;
};

TEST_F(CacheTest, HitsMissesAndTheDataOfTheStore) {
  std::unique_ptr<ExpertCache> cache = MakeCache(4);
  EXPECT_EQ(cache->slot_bytes(), 8192u);
  {
    Result<CacheHandle> h = cache->Acquire({0, 3});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(Bytes(*h), ExpertBytes(0, 3, 1, kPayload));
    EXPECT_EQ(h->slot().size(), 8192u);
  }
  ASSERT_TRUE(cache->Acquire({0, 3}).ok());
  ASSERT_TRUE(cache->Acquire({1, 0}).ok());
  CacheStats stats = cache->stats();
  EXPECT_EQ(stats.misses, 2u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.bytes_read, 2 * kPayload);
  EXPECT_TRUE(cache->Contains({0, 3}));
  EXPECT_FALSE(cache->Contains({0, 4}));
}

// OfferPrefix: a load of the offered key fills the prefix from the caller and reads only the rest
// (the whole extent verified); the offer is used once, and a withdrawn one not at all.
TEST_F(CacheTest, AnOfferedPrefixIsFilledAndOnlyTheRestIsRead) {
  std::unique_ptr<ExpertCache> cache = MakeCache(2);
  const std::vector<std::byte> want = ExpertBytes(0, 1, 1, kPayload);
  std::vector<std::byte> prefix_buf(4096);
  std::promise<Result<ExpertStore::ExtentPrefix>> got;
  store_->ReadPrefixAsync({0, 1}, ExtentKind::kTrainState, kPart, prefix_buf,
                          [&got](Result<ExpertStore::ExtentPrefix> p) { got.set_value(p); });
  Result<ExpertStore::ExtentPrefix> prefix = got.get_future().get();
  ASSERT_TRUE(prefix.ok()) << prefix.status().ToString();
  ASSERT_TRUE(cache->Absent({0, 1}));
  int fills = 0;
  cache->OfferPrefix({0, 1}, *prefix, [&](std::span<std::byte> dst) {
    ++fills;
    ASSERT_EQ(dst.size(), kPart);
    std::memcpy(dst.data(), prefix_buf.data(), kPart);
  });
  {
    Result<CacheHandle> h = cache->Acquire({0, 1});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(Bytes(*h), want);
  }
  EXPECT_FALSE(cache->Absent({0, 1}));
  EXPECT_EQ(fills, 1);
  EXPECT_EQ(cache->stats().bytes_read, kPayload - kPart);
  EXPECT_FALSE(cache->WithdrawPrefix({0, 1}));  // used
  // A prefix whose CRC does not match the extent's first bytes fails the load as corrupt.
  ExpertStore::ExtentPrefix bad = *prefix;
  bad.crc ^= 0x10;
  cache->OfferPrefix({0, 2}, bad, [](std::span<std::byte>) {});
  Result<CacheHandle> failed = cache->Acquire({0, 2});
  EXPECT_EQ(failed.status().code(), StatusCode::kDataLoss) << failed.status().ToString();
  // Withdrawn before use: the load reads the whole extent.
  cache->OfferPrefix({0, 3}, *prefix, [&](std::span<std::byte>) { ++fills; });
  EXPECT_TRUE(cache->WithdrawPrefix({0, 3}));
  const uint64_t before = cache->stats().bytes_read;
  Result<CacheHandle> whole = cache->Acquire({0, 3});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(Bytes(*whole), ExpertBytes(0, 3, 1, kPayload));
  EXPECT_EQ(cache->stats().bytes_read - before, kPayload);
  EXPECT_EQ(fills, 1);
}

// A prefetch with a victim-count bound (the look-ahead's) evicts only colder entries than that.
TEST_F(CacheTest, BoundedPrefetchNeverEvictsAnEntryUsedMoreThanItBrings) {
  std::unique_ptr<ExpertCache> cache = MakeCache(2);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(cache->Acquire({0, 0}).ok());
    ASSERT_TRUE(cache->Acquire({0, 1}).ok());  // both count 2
  }
  Result<bool> refused = cache->Prefetch({0, 2}, /*max_victim_count=*/1.0);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(cache->Contains({0, 0}));
  EXPECT_TRUE(cache->Contains({0, 1}));
  EXPECT_EQ(cache->stats().evictions, 0u);
  EXPECT_EQ(cache->stats().prefetches_dropped, 1u);
  // A protected entry (its user needs it this step) is never a prefetch's victim, bounded or not;
  // a demand miss may still evict it.
  cache->Protect({0, 0});
  cache->Protect({0, 1});
  Result<bool> blocked = cache->Prefetch({0, 2});
  EXPECT_EQ(blocked.status().code(), StatusCode::kResourceExhausted);
  cache->Unprotect({0, 1});
  // Unbounded, it evicts the one left unprotected.
  Result<bool> started = cache->Prefetch({0, 2});
  ASSERT_TRUE(started.ok());
  EXPECT_TRUE(*started);
  EXPECT_EQ(cache->stats().evictions, 1u);
  EXPECT_TRUE(cache->Contains({0, 0}));
  EXPECT_FALSE(cache->Contains({0, 1}));
  cache->ClearProtected();
  ASSERT_TRUE(cache->Acquire({1, 0}).ok());  // a demand miss: protection does not apply
  EXPECT_EQ(cache->stats().evictions, 2u);
}

TEST_F(CacheTest, EvictsTheLfuVictimAndNeverAPinnedEntry) {
  std::unique_ptr<ExpertCache> cache = MakeCache(3);
  // Counts: (0,0)=3, (0,1)=2, (0,2)=1 (threshold 1: all are candidates).
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache->Acquire({0, 0}).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(cache->Acquire({0, 1}).ok());
  Result<CacheHandle> pinned = cache->Acquire({0, 2});  // count 1, but pinned
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(cache->Acquire({0, 5}).ok());  // evicts (0,1): the minimum among unpinned
  EXPECT_TRUE(cache->Contains({0, 0}));
  EXPECT_FALSE(cache->Contains({0, 1}));
  EXPECT_TRUE(cache->Contains({0, 2}));
  EXPECT_TRUE(cache->Contains({0, 5}));
  EXPECT_EQ(Bytes(*pinned), ExpertBytes(0, 2, 1, kPayload));  // untouched while pinned
  EXPECT_EQ(cache->stats().evictions, 1u);
}

TEST_F(CacheTest, AllPinnedTimesOutWithAClearError) {
  std::unique_ptr<ExpertCache> cache = MakeCache(2);
  Result<CacheHandle> a = cache->Acquire({0, 0});
  Result<CacheHandle> b = cache->Acquire({0, 1});
  Result<CacheHandle> c = cache->Acquire({0, 2});
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.status().message().find("pinned"), std::string::npos) << c.status().message();
  EXPECT_EQ(cache->Prefetch({0, 3}).status().code(), StatusCode::kResourceExhausted);
  a->Release();
  EXPECT_TRUE(cache->Acquire({0, 2}).ok());
}

TEST_F(CacheTest, DirtyVictimsAreWrittenBackBeforeTheirSlotIsReused) {
  std::unique_ptr<ExpertCache> cache = MakeCache(2);
  std::vector<std::byte> updated = ExpertBytes(0, 0, 77, kPayload);
  {
    Result<CacheHandle> h = cache->Acquire({0, 0}, AccessMode::kWrite);
    ASSERT_TRUE(h.ok());
    std::memcpy(h->data().data(), updated.data(), kPayload);
  }
  ASSERT_TRUE(cache->Acquire({0, 1}).ok());
  ASSERT_TRUE(cache->Acquire({0, 1}).ok());
  ASSERT_TRUE(cache->Acquire({0, 2}).ok());  // evicts (0,0), count 1 < (0,1)'s 2
  EXPECT_FALSE(cache->Contains({0, 0}));
  EXPECT_EQ(cache->stats().write_backs, 1u);
  EXPECT_EQ(*store_->Generation({0, 0}, ExtentKind::kTrainState), 2u);
  EXPECT_EQ(Stored({0, 0}), updated);
  // Fetching it again brings the written-back state.
  Result<CacheHandle> again = cache->Acquire({0, 0});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Bytes(*again), updated);
}

TEST_F(CacheTest, UpdateCycleAndFlushWriteBackInOnePublish) {
  std::unique_ptr<ExpertCache> cache = MakeCache(4, PolicyKind::kMoESysLfu, /*update_cycle=*/2);
  for (uint32_t e = 0; e < 3; ++e) {
    Result<CacheHandle> h = cache->Acquire({1, e}, AccessMode::kWrite);
    ASSERT_TRUE(h.ok());
    h->data()[0] = std::byte{0x5A};
  }
  uint64_t publishes = store_->stats().publishes;
  ASSERT_TRUE(cache->Step().ok());  // step 1: nothing
  EXPECT_EQ(cache->stats().write_backs, 0u);
  ASSERT_TRUE(cache->Step().ok());  // step 2: the update cycle
  EXPECT_EQ(cache->stats().write_backs, 3u);
  EXPECT_LE(store_->stats().publishes - publishes, 3u);
  for (uint32_t e = 0; e < 3; ++e) {
    EXPECT_EQ(Stored({1, e})[0], std::byte{0x5A});
    EXPECT_EQ(*store_->Generation({1, e}, ExtentKind::kTrainState), 2u);
  }
  // Clean entries are not written again; an entry held for writing is skipped until released.
  ASSERT_TRUE(cache->Flush().ok());
  EXPECT_EQ(cache->stats().write_backs, 3u);
  Result<CacheHandle> writer = cache->Acquire({1, 0}, AccessMode::kWrite);
  ASSERT_TRUE(cache->Flush().ok());
  EXPECT_EQ(cache->stats().write_backs, 3u);
  writer->Release();
  ASSERT_TRUE(cache->Flush().ok());
  EXPECT_EQ(cache->stats().write_backs, 4u);
}

// A store of one layer of four experts, each written once, on `fs`, and a cache of `slots`.
void MakeFaultStore(FileSystem* fs, size_t slots, std::unique_ptr<ExpertStore>* store,
                    std::unique_ptr<ExpertCache>* cache) {
  StoreLayout layout;
  layout.num_layers = 1;
  layout.num_experts = 4;
  layout.kinds.push_back(KindSpec{ExtentKind::kTrainState, {kPayload}, -1});
  Result<std::unique_ptr<ExpertStore>> made = ExpertStore::Create(fs, "/f/store", layout);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  *store = std::move(*made);
  for (uint32_t e = 0; e < 4; ++e) {
    std::vector<std::byte> data = ExpertBytes(0, e, 1, kPayload);
    ASSERT_TRUE((*store)->Write({0, e}, ExtentKind::kTrainState, data).get().ok());
  }
  CacheOptions options;
  options.num_slots = slots;
  options.acquire_timeout_ms = 2000;
  Result<std::unique_ptr<ExpertCache>> c = ExpertCache::Create(store->get(), options);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  *cache = std::move(*c);
}

TEST(CacheFaultTest, FailedWriteBackIsAClearStatusAndTheStoreStaysAtThePreviousGeneration) {
  MemFileSystem mem(1);
  FaultInjectionFileSystem fs(&mem);
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<ExpertCache> cache;
  ASSERT_NO_FATAL_FAILURE(MakeFaultStore(&fs, 1, &store, &cache));
  {
    Result<CacheHandle> h = cache->Acquire({0, 0}, AccessMode::kWrite);
    ASSERT_TRUE(h.ok());
    std::memset(h->data().data(), 0xAB, kPayload);
  }
  // Eviction write-back fails with EIO.
  fs.AddRule(FaultRule{FaultOp::kWrite, FaultKind::kError, EIO, "store", 0, 1, 0});
  Result<CacheHandle> other = cache->Acquire({0, 1});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kIOError);
  EXPECT_NE(other.status().message().find("write-back of evicted layer 0 expert 0"),
            std::string::npos)
      << other.status().message();
  EXPECT_TRUE(cache->Contains({0, 0}));  // still cached, still dirty
  EXPECT_EQ(*store->Generation({0, 0}, ExtentKind::kTrainState), 1u);
  std::vector<std::byte> stored(kPayload);
  ASSERT_TRUE(store->Read({0, 0}, ExtentKind::kTrainState, stored).get().ok());
  EXPECT_EQ(stored, ExpertBytes(0, 0, 1, kPayload));
  // Periodic write-back with ENOSPC on the publish's sync: same story.
  fs.AddRule(FaultRule{FaultOp::kSync, FaultKind::kError, ENOSPC, "store", 0, 1, 0});
  Status flush = cache->Flush();
  EXPECT_EQ(flush.code(), StatusCode::kResourceExhausted) << flush.ToString();
  EXPECT_EQ(*store->Generation({0, 0}, ExtentKind::kTrainState), 1u);
  // Once the disk recovers, the next write-back lands.
  ASSERT_TRUE(cache->Flush().ok());
  EXPECT_GE(*store->Generation({0, 0}, ExtentKind::kTrainState), 2u);
  ASSERT_TRUE(store->Read({0, 0}, ExtentKind::kTrainState, stored).get().ok());
  EXPECT_EQ(stored, std::vector<std::byte>(kPayload, std::byte{0xAB}));
  EXPECT_EQ(cache->stats().write_back_failures, 2u);
}

TEST(CacheFaultTest, WriteBackRunsBehindAndFlushWaitsForItAndReportsItsFailure) {
  MemFileSystem mem(1);
  FaultInjectionFileSystem fs(&mem);
  std::unique_ptr<ExpertStore> store;
  std::unique_ptr<ExpertCache> cache;
  ASSERT_NO_FATAL_FAILURE(MakeFaultStore(&fs, 2, &store, &cache));
  auto update = [&](uint32_t e, uint8_t value) {
    Result<CacheHandle> h = cache->Acquire({0, e}, AccessMode::kWrite);
    ASSERT_TRUE(h.ok());
    std::memset(h->data().data(), value, kPayload);
    // Held for writing: not written back yet.
    EXPECT_FALSE(cache->WriteBack({0, e}));
  };
  update(0, 0xA1);
  EXPECT_TRUE(cache->WriteBack({0, 0}));
  EXPECT_FALSE(cache->WriteBack({0, 3}));  // not cached
  ASSERT_TRUE(cache->Flush().ok());        // waits for it; nothing else is dirty
  EXPECT_EQ(cache->stats().write_backs, 1u);
  EXPECT_GT(cache->stats().write_busy_ns, 0u);
  EXPECT_EQ(*store->Generation({0, 0}, ExtentKind::kTrainState), 2u);
  std::vector<std::byte> stored(kPayload);
  ASSERT_TRUE(store->Read({0, 0}, ExtentKind::kTrainState, stored).get().ok());
  EXPECT_EQ(stored, std::vector<std::byte>(kPayload, std::byte{0xA1}));
  EXPECT_FALSE(cache->WriteBack({0, 0}));  // clean now
  // Clean: evicting it writes nothing.
  ASSERT_TRUE(cache->Acquire({0, 1}).ok());
  ASSERT_TRUE(cache->Acquire({0, 1}).ok());
  ASSERT_TRUE(cache->Acquire({0, 2}).ok());
  EXPECT_FALSE(cache->Contains({0, 0}));
  EXPECT_EQ(cache->stats().write_backs, 1u);

  // A write-behind that fails leaves the entry dirty; the next Flush reports it, naming it.
  update(2, 0xB2);
  fs.AddRule(FaultRule{FaultOp::kWrite, FaultKind::kError, EIO, "store", 0, 1, 0});
  EXPECT_TRUE(cache->WriteBack({0, 2}));
  Status flushed = cache->Flush();
  EXPECT_EQ(flushed.code(), StatusCode::kIOError) << flushed.ToString();
  EXPECT_NE(flushed.message().find("write-back of layer 0 expert 2"), std::string::npos)
      << flushed.message();
  // The Flush's own batch retried it: durable now, and the failure was reported once.
  ASSERT_TRUE(cache->Flush().ok());
  ASSERT_TRUE(store->Read({0, 2}, ExtentKind::kTrainState, stored).get().ok());
  EXPECT_EQ(stored, std::vector<std::byte>(kPayload, std::byte{0xB2}));
  EXPECT_EQ(cache->stats().write_back_failures, 1u);
}

TEST_F(CacheTest, LoadFailureFailsTheAcquireAndFreesTheSlot) {
  std::unique_ptr<ExpertCache> cache = MakeCache(2);
  // A store with a never-written expert: build a fresh one.
  StoreLayout layout;
  layout.num_layers = 1;
  layout.num_experts = 2;
  layout.kinds.push_back(KindSpec{ExtentKind::kTrainState, {kPayload}, -1});
  auto fresh = ExpertStore::Create(&mem_, "/c/fresh", layout);
  ASSERT_TRUE(fresh.ok());
  CacheOptions options;
  options.num_slots = 1;
  auto fresh_cache = ExpertCache::Create(fresh->get(), options);
  ASSERT_TRUE(fresh_cache.ok());
  Result<CacheHandle> h = (*fresh_cache)->Acquire({0, 1});
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*fresh_cache)->stats().load_failures, 1u);
  std::vector<std::byte> data = ExpertBytes(0, 1, 1, kPayload);
  ASSERT_TRUE((*fresh)->Write({0, 1}, ExtentKind::kTrainState, data).get().ok());
  EXPECT_TRUE((*fresh_cache)->Acquire({0, 1}).ok());  // the slot was not leaked
}

// Many threads acquire, update and release; the prefetcher runs beside them. Run under TSan too
// (docs/storage.md). Every byte read must match the value its expert was last given.
TEST_F(CacheTest, ConcurrentAcquireUpdateAndPrefetch) {
  for (PolicyKind kind : {PolicyKind::kMoESysLfu, PolicyKind::kLru, PolicyKind::kWTinyLfu}) {
    std::unique_ptr<ExpertCache> cache = MakeCache(5, kind, /*update_cycle=*/3);
    Prefetcher prefetcher(cache.get(), PrefetcherOptions{2, nullptr});
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    // The previous policy's run left its updates in the store: start from what is there.
    std::vector<uint8_t> start_bytes;
    for (uint32_t e = 0; e < 8; ++e) start_bytes.push_back(static_cast<uint8_t>(Stored({0, e})[0]));
    // Each thread owns two experts of layer 0 and bumps a counter in their first bytes.
    for (uint32_t t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(t);
        uint8_t expected[2];
        for (uint32_t which = 0; which < 2; ++which) {
          expected[which] = start_bytes[t * 2 + which];
        }
        for (int i = 0; i < 150; ++i) {
          uint32_t which = rng() % 2;
          uint32_t expert = t * 2 + which;
          uint32_t ahead[2] = {static_cast<uint32_t>(rng() % 8), static_cast<uint32_t>(rng() % 8)};
          prefetcher.Prefetch(1, ahead, i % 2 ? PrefetchPriority::kHigh : PrefetchPriority::kLow);
          Result<CacheHandle> h = prefetcher.Acquire(0, expert, AccessMode::kWrite);
          if (!h.ok()) {
            ADD_FAILURE() << "acquire " << expert << ": " << h.status().ToString();
            ++errors;
            continue;
          }
          if (static_cast<uint8_t>(h->data()[0]) != expected[which]) {
            ADD_FAILURE() << "expert " << expert << " holds " << int(uint8_t(h->data()[0]))
                          << ", expected " << int(expected[which]) << " at iteration " << i;
            ++errors;
          }
          expected[which] = static_cast<uint8_t>(expected[which] + 1);
          h->data()[0] = static_cast<std::byte>(expected[which]);
          h->Release();
          Result<CacheHandle> reader = cache->Acquire({1, ahead[0]});
          if (!reader.ok() || reader->data()[1] != ExpertBytes(1, ahead[0], 1, kPayload)[1]) {
            ADD_FAILURE() << "reader of layer 1 expert " << ahead[0] << ": "
                          << reader.status().ToString();
            ++errors;
          }
          if (i % 10 == 0) {
            Status step = cache->Step();
            if (!step.ok()) {
              ADD_FAILURE() << "step: " << step.ToString();
              ++errors;
            }
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    prefetcher.Drain();
    EXPECT_EQ(errors.load(), 0) << PolicyKindName(kind);
    CacheStats stats = cache->stats();
    EXPECT_GT(stats.evictions, 0u);
    EXPECT_GT(stats.write_backs, 0u);
    ASSERT_TRUE(cache->Flush().ok());
  }
}

class RecordingHop : public NextHop {
 public:
  void OnHostReady(CacheHandle handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    keys_.push_back(handle.key());
    first_bytes_.push_back(handle.data()[5]);
    held_.push_back(std::move(handle));  // a copy stream would hold it until its event fires
  }
  void ReleaseAll() {
    std::lock_guard<std::mutex> lock(mutex_);
    held_.clear();
  }
  std::vector<ExpertKey> keys() {
    std::lock_guard<std::mutex> lock(mutex_);
    return keys_;
  }
  std::vector<std::byte> bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_bytes_;
  }

 private:
  std::mutex mutex_;
  std::vector<ExpertKey> keys_;
  std::vector<std::byte> first_bytes_;
  std::vector<CacheHandle> held_;
};

TEST_F(CacheTest, PrefetchedExpertsAreHitsAndGoOnToTheNextHop) {
  std::unique_ptr<ExpertCache> cache = MakeCache(4);
  RecordingHop hop;
  {
    Prefetcher prefetcher(cache.get(), PrefetcherOptions{1, &hop});
    uint32_t experts[] = {1, 2, 3};
    prefetcher.Prefetch(1, experts, PrefetchPriority::kHigh);
    prefetcher.Drain();
    std::vector<ExpertKey> keys = hop.keys();
    ASSERT_EQ(keys.size(), 3u);
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(hop.bytes()[i], ExpertBytes(1, keys[i].expert, 1, kPayload)[5]);
    }
    // The hop holds the pins: the entries cannot be evicted even by a flood of other experts.
    for (uint32_t e = 0; e < 8; ++e) {
      if (e >= 1 && e <= 3) continue;
      ASSERT_TRUE(cache->Acquire({0, e}).ok());
    }
    for (uint32_t e = 1; e <= 3; ++e) EXPECT_TRUE(cache->Contains({1, e}));
    hop.ReleaseAll();
    CacheStats before = cache->stats();
    Result<CacheHandle> h = prefetcher.Acquire(1, 2);
    ASSERT_TRUE(h.ok());
    CacheStats after = cache->stats();
    EXPECT_EQ(after.hits, before.hits + 1);
    EXPECT_EQ(after.misses, before.misses);
    EXPECT_EQ(after.prefetches_started, 3u);
    EXPECT_EQ(prefetcher.stats().handed_on, 3u);
  }
}

}  // namespace
}  // namespace sy::storage
