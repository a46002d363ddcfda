// CachedHostExperts: the host tier read from the expert store (in-memory file system) through the
// storage ExpertCache, with fewer host slots than experts. The device path and the CPU executor
// over it equal LocalExpertCompute; an expert missing from the store fails its transfer.
#include "inference/offload/cached_host_experts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "inference/offload/cpu_expert_executor.h"
#include "storage/fs/mem_file_system.h"
#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

class CachedHostExpertsTest : public ::testing::Test {
 protected:
  // A store holding every expert of `reference` except those in `skip`, and a 2-slot LFU cache.
  void Open(ReferenceExperts& reference, std::vector<ExpertKey> skip = {}) {
    const ExpertLayout& layout = reference.layout();
    storage::StoreLayout store_layout;
    store_layout.num_layers = static_cast<uint32_t>(layout.num_layers);
    store_layout.num_experts = static_cast<uint32_t>(layout.num_experts);
    store_layout.kinds.push_back(
        storage::KindSpec{storage::ExtentKind::kWeights,
                          {layout.chunk_bytes(), layout.chunk_bytes(), layout.chunk_bytes()},
                          -1});
    store_ = storage::ExpertStore::Create(&fs_, "/offload/store", store_layout).value();
    std::vector<std::byte> extent(layout.expert_bytes());
    for (uint32_t m = 0; m < store_layout.num_layers; ++m) {
      for (uint32_t e = 0; e < store_layout.num_experts; ++e) {
        if (std::find(skip.begin(), skip.end(), ExpertKey{m, e}) != skip.end()) continue;
        for (ExpertChunk c : kExpertChunks) {
          Tensor w = reference.Weight({m, e}, c);
          std::memcpy(extent.data() + static_cast<size_t>(c) * layout.chunk_bytes(), w.data(),
                      w.nbytes());
        }
        ASSERT_TRUE(store_->Write({m, e}, storage::ExtentKind::kWeights, extent).get().ok());
      }
    }
    storage::CacheOptions cache_options;
    cache_options.num_slots = 2;
    cache_options.kind = storage::ExtentKind::kWeights;
    cache_ = storage::ExpertCache::Create(store_.get(), cache_options).value();
    host_ = CachedHostExperts::Create(cache_.get(), layout).value();
  }

  storage::MemFileSystem fs_{1};
  std::unique_ptr<storage::ExpertStore> store_;
  std::unique_ptr<storage::ExpertCache> cache_;
  std::unique_ptr<CachedHostExperts> host_;
};

TEST_F(CachedHostExpertsTest, DevicePathOverTheStoreEqualsLocalExpertCompute) {
  const ExpertLayout layout{
      .num_layers = 2, .num_experts = 4, .hidden = 64, .intermediate = 96, .dtype = DType::kBF16};
  ReferenceExperts reference(layout, 21);
  Open(reference);
  auto sim = MakeSim(/*gbps=*/4.0, size_t{64} << 20);
  size_t activation_bytes = 0;
  const TransferStats stats =
      ExpectDevicePathMatchesReference(reference, *sim, *host_, &activation_bytes);
  EXPECT_EQ(stats.tasks_completed, 16u);
  // 8 experts, each twice in the same order, through 2 host slots under MoESys LFU, whose ties
  // evict the most recently used entry: in the first pass every new expert replaces the one
  // loaded just before it, so expert (0,0) stays and its second use hits; in the second pass
  // (0,0) has the higher count and stays while the other slot turns over. 15 transfers read
  // their expert from the store.
  const storage::CacheStats host_stats = cache_->stats();
  EXPECT_EQ(host_stats.hits, 1u);
  EXPECT_EQ(host_stats.misses, 15u);
  EXPECT_EQ(host_stats.bytes_read, 15 * store_->Kind(storage::ExtentKind::kWeights)->stride);
}

TEST_F(CachedHostExpertsTest, CpuExecutorOverTheStoreEqualsLocalExpertCompute) {
  const ExpertLayout layout{
      .num_layers = 1, .num_experts = 4, .hidden = 48, .intermediate = 80, .dtype = DType::kF32};
  ReferenceExperts reference(layout, 22);
  Open(reference);
  CpuExpertExecutor executor(*host_, {.num_threads = 2});
  for (uint32_t e = 0; e < 4; ++e) {
    std::vector<float> x = RandomRows(3, layout.hidden, e), y(x.size(), 0.0f);
    const Shape shape{3, layout.hidden};
    ASSERT_TRUE(executor
                    .Run({0, e}, Tensor::Wrap(x.data(), DType::kF32, shape),
                         Tensor::Wrap(y.data(), DType::kF32, shape))
                    .get()
                    .ok());
    EXPECT_LE(MaxRelError(y, reference.Forward({0, e}, x)), 1e-5);
  }
}

TEST_F(CachedHostExpertsTest, AnExpertMissingFromTheStoreFailsItsTransfer) {
  const ExpertLayout layout{
      .num_layers = 1, .num_experts = 4, .hidden = 32, .intermediate = 32, .dtype = DType::kF32};
  ReferenceExperts reference(layout, 23);
  Open(reference, /*skip=*/{{0, 2}});
  auto sim = MakeSim(/*gbps=*/4.0, size_t{16} << 20);
  auto cache =
      DeviceExpertCache::Create(*sim, layout, CacheOptions(2, DeviceCachePolicy::kLru)).value();
  TransferEngine engine(*sim, *host_, *cache);
  SlotHandle missing = engine.Enqueue(TransferPriority::kHigh, {0, 2}).value();
  const Status status = engine.Wait(missing);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.ToString();
  missing.Release();
  engine.Drain();
  EXPECT_EQ(engine.stats().tasks_failed, 1u);
  EXPECT_EQ(engine.stats().bytes_host_to_device, 0u);
  EXPECT_EQ(cache->Lookup({0, 2}), -1);
  // The others still arrive.
  ASSERT_TRUE(engine.Wait(engine.Enqueue(TransferPriority::kHigh, {0, 1}).value()).ok());
  // A cache whose extents do not hold the layout's experts is refused.
  ExpertLayout wrong = layout;
  wrong.intermediate = 16;
  EXPECT_EQ(CachedHostExperts::Create(cache_.get(), wrong).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sy::offload
