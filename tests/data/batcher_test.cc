// Tests of the Batcher: determinism, epochs and shuffling, data-parallel shards, and resuming from
// a saved position with bit-identical batches.
#include "runtime/data/batcher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "runtime/data/synthetic_dataset.h"
#include "runtime/data/token_file_dataset.h"

namespace sy {
namespace {

std::unique_ptr<SyntheticDataset> Synthetic(uint64_t seed = 1) {
  auto dataset = SyntheticDataset::Create({}, 32, seed, 0.1, std::array<double, 5>{1, 2, 1, 1, 1});
  SY_CHECK(dataset.ok()) << dataset.status().ToString();
  return std::move(dataset).value();
}

// A token file of `n` distinct u32 tokens, removed at scope exit.
class TokenFile {
 public:
  explicit TokenFile(uint32_t n) {
    path_ = (std::filesystem::temp_directory_path() /
             ("sy_batcher_test_" + std::to_string(::getpid()) + "_" + std::to_string(n) + ".bin"))
                .string();
    std::ofstream out(path_, std::ios::binary);
    for (uint32_t i = 0; i < n; ++i) out.write(reinterpret_cast<const char*>(&i), 4);
  }
  ~TokenFile() { std::remove(path_.c_str()); }
  std::unique_ptr<TokenFileDataset> Open(int64_t seq_len = 7) const {
    auto dataset = TokenFileDataset::Open(path_, TokenDType::kU32, seq_len, 0, 0.1);
    SY_CHECK(dataset.ok()) << dataset.status().ToString();
    return std::move(dataset).value();
  }

 private:
  std::string path_;
};

// The bytes of a batch, for bit-exact comparison.
std::vector<int32_t> Flatten(const Batch& batch) {
  std::vector<int32_t> all;
  for (const Tensor* t : {&batch.tokens, &batch.targets, &batch.task_ids}) {
    const int32_t* p = t->data<int32_t>();
    all.insert(all.end(), p, p + t->numel());
  }
  return all;
}

std::vector<std::vector<int32_t>> Take(Batcher& batcher, int n) {
  std::vector<std::vector<int32_t>> batches;
  Batch batch;
  for (int i = 0; i < n; ++i) {
    Status status = batcher.Next(&batch);
    SY_CHECK(status.ok()) << status.ToString();
    batches.push_back(Flatten(batch));
  }
  return batches;
}

BatcherOptions Options(int64_t batch_size, Split split = Split::kTrain, uint64_t seed = 3,
                       bool shuffle = true) {
  BatcherOptions options;
  options.batch_size = batch_size;
  options.split = split;
  options.seed = seed;
  options.shuffle = shuffle;
  return options;
}

TEST(BatcherTest, BatchShapesAndDeterminism) {
  auto dataset = Synthetic();
  auto a = Batcher::Create(dataset.get(), Options(4));
  auto b = Batcher::Create(dataset.get(), Options(4));
  ASSERT_TRUE(a.ok() && b.ok());
  Batch batch;
  ASSERT_TRUE(a->Next(&batch).ok());
  EXPECT_EQ(batch.tokens.shape(), (Shape{4, 32}));
  EXPECT_EQ(batch.targets.shape(), (Shape{4, 32}));
  EXPECT_EQ(batch.task_ids.shape(), (Shape{4}));
  EXPECT_EQ(batch.tokens.dtype(), DType::kI32);
  EXPECT_TRUE(batch.tokens.device().is_host());
  a->Rewind();
  EXPECT_EQ(Take(*a, 5), Take(*b, 5));
  EXPECT_EQ(a->cursor(), 20);
}

TEST(BatcherTest, ResumeIsBitExactForSyntheticData) {
  auto dataset = Synthetic(7);
  auto run = Batcher::Create(dataset.get(), Options(3));
  ASSERT_TRUE(run.ok());
  Take(*run, 4);
  const std::string saved = run->SavePosition();
  const auto expected = Take(*run, 6);

  auto fresh_dataset = Synthetic(7);
  auto resumed = Batcher::Create(fresh_dataset.get(), Options(3));
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(resumed->RestorePosition(saved).ok());
  EXPECT_EQ(Take(*resumed, 6), expected);
}

TEST(BatcherTest, ResumeRestoresChangedTaskWeights) {
  auto dataset = Synthetic(7);
  auto run = Batcher::Create(dataset.get(), Options(8));
  ASSERT_TRUE(run.ok());
  Take(*run, 2);
  ASSERT_TRUE(dataset->SetTaskWeights(std::array<double, 5>{0, 0, 1, 0, 3}).ok());
  const std::string saved = run->SavePosition();
  const auto expected = Take(*run, 3);

  auto fresh = Synthetic(7);  // configured with the original weights
  auto resumed = Batcher::Create(fresh.get(), Options(8));
  ASSERT_TRUE(resumed.ok());
  ASSERT_TRUE(resumed->RestorePosition(saved).ok());
  EXPECT_EQ(fresh->task_weights(), dataset->task_weights());
  EXPECT_EQ(Take(*resumed, 3), expected);
}

TEST(BatcherTest, EpochsVisitEveryWindowOnceInAShuffledOrder) {
  TokenFile file(8 * 100);  // 100 windows of 8 tokens: 90 train, 10 eval
  auto dataset = file.Open();
  ASSERT_EQ(dataset->size(Split::kTrain), 90);
  auto batcher = Batcher::Create(dataset.get(), Options(10));
  ASSERT_TRUE(batcher.ok());
  std::vector<int32_t> first_epoch;
  Batch batch;
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(batcher->Next(&batch).ok());
    for (int r = 0; r < 10; ++r) first_epoch.push_back(batch.tokens.data<int32_t>()[r * 7] / 8);
  }
  std::set<int32_t> windows(first_epoch.begin(), first_epoch.end());
  EXPECT_EQ(windows.size(), 90u);
  EXPECT_EQ(*windows.rbegin(), 89) << "no eval window in training";
  EXPECT_FALSE(std::is_sorted(first_epoch.begin(), first_epoch.end())) << "shuffled";
  EXPECT_EQ(batcher->epoch(), 0);
  ASSERT_TRUE(batcher->Next(&batch).ok());
  EXPECT_EQ(batcher->epoch(), 1);
  std::vector<int32_t> second;
  for (int r = 0; r < 10; ++r) second.push_back(batch.tokens.data<int32_t>()[r * 7] / 8);
  EXPECT_NE(second, std::vector<int32_t>(first_epoch.begin(), first_epoch.begin() + 10))
      << "each epoch has its own order";
}

TEST(BatcherTest, ResumeIsBitExactAcrossEpochBoundaries) {
  TokenFile file(8 * 50);
  auto dataset = file.Open();
  for (int stop : {0, 3, 4, 5, 11}) {  // 45 train windows, batch 10: epochs end mid-batch
    auto run = Batcher::Create(dataset.get(), Options(10));
    ASSERT_TRUE(run.ok());
    Take(*run, stop);
    const std::string saved = run->SavePosition();
    const auto expected = Take(*run, 7);
    auto reopened = file.Open();
    auto resumed = Batcher::Create(reopened.get(), Options(10));
    ASSERT_TRUE(resumed.ok());
    ASSERT_TRUE(resumed->RestorePosition(saved).ok()) << saved;
    EXPECT_EQ(Take(*resumed, 7), expected) << "stopped after " << stop << " batches";
  }
}

TEST(BatcherTest, EvalBatcherRewindsToTheSameBatches) {
  TokenFile file(8 * 100);
  auto dataset = file.Open();
  auto eval = Batcher::Create(dataset.get(), Options(4, Split::kEval, 3, false));
  ASSERT_TRUE(eval.ok());
  const auto first = Take(*eval, 3);
  eval->Rewind();
  EXPECT_EQ(Take(*eval, 3), first);
  Batch batch;
  eval->Rewind();
  ASSERT_TRUE(eval->Next(&batch).ok());
  EXPECT_EQ(batch.tokens.data<int32_t>()[0], 90 * 8) << "eval starts at the held-out tail";
}

TEST(BatcherTest, ShardsSplitTheGlobalBatch) {
  auto dataset = Synthetic(5);
  BatcherOptions whole = Options(6);
  auto reference = Batcher::Create(dataset.get(), whole);
  ASSERT_TRUE(reference.ok());
  std::vector<Batcher> shards;
  for (int r = 0; r < 3; ++r) {
    BatcherOptions o = Options(2);
    o.num_shards = 3;
    o.shard = r;
    auto shard = Batcher::Create(dataset.get(), o);
    ASSERT_TRUE(shard.ok());
    shards.push_back(std::move(shard).value());
  }
  for (int step = 0; step < 4; ++step) {
    Batch full;
    ASSERT_TRUE(reference->Next(&full).ok());
    for (int r = 0; r < 3; ++r) {
      Batch part;
      ASSERT_TRUE(shards[r].Next(&part).ok());
      EXPECT_EQ(std::memcmp(part.tokens.data<int32_t>(), full.tokens.data<int32_t>() + r * 2 * 32,
                            2 * 32 * sizeof(int32_t)),
                0);
      EXPECT_EQ(part.task_ids.data<int32_t>()[1], full.task_ids.data<int32_t>()[r * 2 + 1]);
      EXPECT_EQ(shards[r].SavePosition(), reference->SavePosition());
    }
  }
}

TEST(BatcherTest, MismatchedPositionsAreRejected) {
  auto dataset = Synthetic(1);
  auto batcher = Batcher::Create(dataset.get(), Options(4));
  ASSERT_TRUE(batcher.ok());
  Take(*batcher, 2);
  const std::string saved = batcher->SavePosition();

  auto other_seed = Synthetic(2);
  auto b = Batcher::Create(other_seed.get(), Options(4));
  ASSERT_TRUE(b.ok());
  Status dataset_seed = b->RestorePosition(saved);
  ASSERT_FALSE(dataset_seed.ok());
  EXPECT_NE(dataset_seed.message().find("different dataset"), std::string::npos);
  EXPECT_NE(dataset_seed.message().find("seed 1 -> 2"), std::string::npos)
      << dataset_seed.message();

  auto c = Batcher::Create(dataset.get(), Options(4, Split::kTrain, 99));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->RestorePosition(saved).message().find("data seed 3"), std::string::npos);

  auto d = Batcher::Create(dataset.get(), Options(4, Split::kEval));
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->RestorePosition(saved).message().find("\"train\" split"), std::string::npos);

  EXPECT_FALSE(batcher->RestorePosition("{not json").ok());
  EXPECT_FALSE(batcher->RestorePosition("{}").ok());
  EXPECT_FALSE(batcher
                   ->RestorePosition(R"({"format": "switchyard-data-position", "version": 1,
      "epoch": -1, "cursor": 0, "seed": 3})")
                   .ok());
  // A failed restore leaves the position alone.
  EXPECT_EQ(batcher->cursor(), 8);
}

// Issue 20, defect 2: a batch too large for memory is a ResourceExhausted Status from Next.
TEST(BatcherTest, BatchTooLargeForMemoryIsAnError) {
  std::unique_ptr<SyntheticDataset> dataset = Synthetic();
  auto batcher = Batcher::Create(dataset.get(), Options(int64_t{1} << 42));
  ASSERT_TRUE(batcher.ok()) << batcher.status().ToString();
  Batch batch;
  Status s = batcher->Next(&batch);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
}

TEST(BatcherTest, BadOptionsAndEmptySplits) {
  auto dataset = SyntheticDataset::Create({}, 32, 1, 0.0, std::array<double, 5>{1, 1, 1, 1, 1});
  ASSERT_TRUE(dataset.ok());
  EXPECT_FALSE(Batcher::Create(dataset->get(), Options(0)).ok());
  auto eval = Batcher::Create(dataset->get(), Options(2, Split::kEval));
  ASSERT_FALSE(eval.ok());
  EXPECT_NE(eval.status().message().find("eval split of synthetic is empty"), std::string::npos);
  BatcherOptions bad_shard = Options(2);
  bad_shard.num_shards = 2;
  bad_shard.shard = 2;
  EXPECT_FALSE(Batcher::Create(dataset->get(), bad_shard).ok());
}

}  // namespace
}  // namespace sy
