// Tests of TaskAccuracy: only scored positions count, per task, with exact match per example.
#include "runtime/data/task_accuracy.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/data/synthetic_dataset.h"

namespace sy {
namespace {

TEST(TaskAccuracyTest, CountsOnlyScoredPositionsPerTask) {
  // Three rows of length 4: row 0 (task 1) fully right, row 1 (task 1) one of two wrong,
  // row 2 (task 0) has no scored position.
  const std::vector<int32_t> targets = {-1, 5, 6, -1, /**/ -1, -1, 7, 8, /**/ -1, -1, -1, -1};
  const std::vector<int32_t> predict = {9, 5, 6, 9, /**/ 7, 7, 7, 0, /**/ 1, 2, 3, 4};
  const std::vector<int32_t> tasks = {1, 1, 0};
  TaskAccuracy accuracy(2);
  accuracy.Add(targets, predict, tasks, 4);
  EXPECT_EQ(accuracy.task(0).examples, 0);
  EXPECT_EQ(accuracy.task(1).examples, 2);
  EXPECT_EQ(accuracy.task(1).exact_matches, 1);
  EXPECT_EQ(accuracy.task(1).tokens, 4);
  EXPECT_EQ(accuracy.task(1).correct_tokens, 3);
  EXPECT_DOUBLE_EQ(accuracy.task(1).exact_match(), 0.5);
  EXPECT_DOUBLE_EQ(accuracy.task(1).token_accuracy(), 0.75);
  EXPECT_DOUBLE_EQ(accuracy.task(0).exact_match(), 0.0);
  EXPECT_EQ(accuracy.total().tokens, 4);
  accuracy.Reset();
  EXPECT_EQ(accuracy.total().examples, 0);
}

TEST(TaskAccuracyTest, PerfectPredictionsOfSyntheticBatches) {
  auto dataset = SyntheticDataset::Create({}, 32, 4, 0.1, std::array<double, 5>{1, 1, 1, 1, 1});
  ASSERT_TRUE(dataset.ok());
  auto batcher = Batcher::Create(dataset->get(), BatcherOptions{.batch_size = 16});
  ASSERT_TRUE(batcher.ok());
  Batch batch;
  ASSERT_TRUE(batcher->Next(&batch).ok());
  // Predicting each target exactly is perfect; predicting PAD everywhere is never right, since
  // every answer ends with a scored EOS and PAD is never a target.
  Tensor perfect = Tensor::Host(DType::kI32, batch.targets.shape());
  Tensor pads = Tensor::Host(DType::kI32, batch.targets.shape());
  for (int64_t i = 0; i < perfect.numel(); ++i) {
    perfect.data<int32_t>()[i] = batch.targets.data<int32_t>()[i];
    pads.data<int32_t>()[i] = kPad;
  }
  TaskAccuracy right(5), wrong(5);
  right.Add(batch, perfect);
  wrong.Add(batch, pads);
  EXPECT_EQ(right.total().examples, 16);
  EXPECT_DOUBLE_EQ(right.total().exact_match(), 1.0);
  EXPECT_DOUBLE_EQ(wrong.total().token_accuracy(), 0.0);
  const std::string text = right.ToString(**dataset);
  EXPECT_NE(text.find("copy exact"), std::string::npos) << text;
  EXPECT_NE(text.find("all exact 1.000 token 1.000 (n=16)"), std::string::npos) << text;
}

}  // namespace
}  // namespace sy
