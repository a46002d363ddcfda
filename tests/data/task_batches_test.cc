// Per-task batches (runtime/data/task_batches.h): the rows of each task, the loss weights, the
// streams' examples and their saved positions.
#include "runtime/data/task_batches.h"

#include <gtest/gtest.h>

#include <numeric>

namespace sy {
namespace {

DataOptions Options() {
  DataOptions o;
  o.seq_len = 16;
  o.batch_size = 8;
  o.synthetic.max_len = 6;
  o.synthetic.modulus = 10;
  o.synthetic.markov_prefix_len = 4;
  o.synthetic.markov_answer_len = 4;
  o.synthetic.num_symbols = 12;
  return o;
}

TEST(TaskBatchesTest, RowsFollowWeightsWhenNoBatchSize) {
  DataOptions o = Options();
  EXPECT_FALSE(HasTaskBatchSizes(o));
  o.tasks.modadd.weight = 3;  // weights 1 1 1 3 1 of 7: 8 rows -> 1.14 1.14 1.14 3.43 1.14
  const std::vector<int64_t> rows = TaskRowsAt(o, 0);
  EXPECT_EQ(std::accumulate(rows.begin(), rows.end(), int64_t{0}), 8);
  EXPECT_EQ(rows, (std::vector<int64_t>{1, 1, 1, 4, 1}));  // the largest remainder is modadd's
  o.tasks.sort.weight = 0;
  EXPECT_EQ(TaskRowsAt(o, 0)[2], 0);
  const std::vector<double> w = TaskLossWeights(o, TaskRowsAt(o, 0));
  EXPECT_DOUBLE_EQ(w[2], 0.0);
  EXPECT_DOUBLE_EQ(w[3], 3.0 / 6.0);
}

TEST(TaskBatchesTest, ExplicitBatchSizesAndGrowth) {
  DataOptions o = Options();
  o.tasks.copy.batch_size = 8;
  o.tasks.reverse.batch_size = 4;
  o.tasks.sort.batch_size = 2;
  o.tasks.modadd.batch_size = 2;
  o.tasks.markov.weight = 0;
  o.tasks.sort.grow_at_step = 3;
  o.tasks.sort.grow_batch_size = 10;
  EXPECT_TRUE(HasTaskBatchSizes(o));
  EXPECT_EQ(TaskRowsAt(o, 0), (std::vector<int64_t>{8, 4, 2, 2, 0}));
  EXPECT_EQ(TaskRowsAt(o, 1), (std::vector<int64_t>{8, 4, 2, 2, 0}));
  EXPECT_EQ(TaskRowsAt(o, 2), (std::vector<int64_t>{8, 4, 10, 2, 0}));  // step 3
  // Equal weights: each task's mean counts a quarter, whatever its rows.
  for (int t = 0; t < 4; ++t) EXPECT_DOUBLE_EQ(TaskLossWeights(o, TaskRowsAt(o, 0))[t], 0.25);
}

TEST(TaskBatchesTest, SlicesAreTheTaskStreamsRowsAndPositionsResume) {
  DataOptions o = Options();
  o.tasks.copy.batch_size = 4;
  o.tasks.reverse.batch_size = 2;
  auto dataset = CreateDataset(o);
  ASSERT_TRUE(dataset.ok()) << dataset.status().message();
  auto* synthetic = dynamic_cast<SyntheticDataset*>(dataset->get());
  Result<TaskStreams> streams = TaskStreams::Create(o, dataset->get());
  ASSERT_TRUE(streams.ok()) << streams.status().message();
  streams->Advance();  // step 2: copy rows [4, 8) of its stream
  Batch whole, parts;
  ASSERT_TRUE(streams->Fill({{0, 0, 4}}, &whole).ok());
  ASSERT_TRUE(streams->Fill({{0, 2, 4}, {1, 0, 1}, {0, 0, 2}}, &parts).ok());
  ASSERT_EQ(parts.batch_size(), 5);
  const int64_t t = o.seq_len;
  std::vector<int32_t> tokens(t), targets(t);
  // Row 2 of the parts is reverse's example 2 (its cursor after one step of 2 rows).
  ASSERT_EQ(*synthetic->GetTaskExample(1, 2, tokens, targets), 1);
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), parts.tokens.data<int32_t>() + 2 * t));
  EXPECT_EQ(parts.task_ids.data<int32_t>()[2], 1);
  // The parts' copy rows are the whole batch's rows 2, 3, 0, 1; all are copy examples.
  for (auto [part, row] : {std::pair{0, 2}, {1, 3}, {3, 0}, {4, 1}}) {
    EXPECT_TRUE(std::equal(parts.tokens.data<int32_t>() + part * t,
                           parts.tokens.data<int32_t>() + (part + 1) * t,
                           whole.tokens.data<int32_t>() + row * t));
    EXPECT_EQ(parts.tokens.data<int32_t>()[part * t], kTaskTagBase);
  }
  // A saved position resumes the same next batch.
  const std::string saved = streams->SavePosition();
  streams->Advance();
  Batch next;
  ASSERT_TRUE(streams->Fill({{0, 0, 4}}, &next).ok());
  Result<TaskStreams> again = TaskStreams::Create(o, dataset->get());
  ASSERT_TRUE(again->RestorePosition(saved).ok());
  again->Advance();
  Batch next_again;
  ASSERT_TRUE(again->Fill({{0, 0, 4}}, &next_again).ok());
  EXPECT_TRUE(std::equal(next.tokens.data<int32_t>(), next.tokens.data<int32_t>() + 4 * t,
                         next_again.tokens.data<int32_t>()));
  EXPECT_FALSE(std::equal(next.tokens.data<int32_t>(), next.tokens.data<int32_t>() + 4 * t,
                          whole.tokens.data<int32_t>()));
  // A mixed-batch position, another seed, or garbage is refused with what differs.
  EXPECT_NE(again->RestorePosition("{\"format\": \"switchyard-data-position\"}")
                .message()
                .find("mixed batch"),
            std::string::npos);
  EXPECT_FALSE(again->RestorePosition("not json").ok());
  DataOptions other = o;
  other.seed = 99;
  Result<TaskStreams> third = TaskStreams::Create(other, dataset->get());
  EXPECT_NE(third->RestorePosition(saved).message().find("seed"), std::string::npos);
}

TEST(TaskBatchesTest, NeedsSyntheticDataAndSomeRows) {
  DataOptions o = Options();
  for (SyntheticTaskMix* m :
       {&o.tasks.copy, &o.tasks.reverse, &o.tasks.sort, &o.tasks.modadd, &o.tasks.markov}) {
    m->weight = 0;
  }
  o.tasks.copy.weight = 1;
  o.batch_size = 1;
  auto dataset = CreateDataset(o);
  ASSERT_TRUE(dataset.ok());
  EXPECT_TRUE(TaskStreams::Create(o, dataset->get()).ok());
  o.source = DataSource::kTokens;
  EXPECT_NE(TaskStreams::Create(o, dataset->get()).status().message().find("data.source"),
            std::string::npos);
}

}  // namespace
}  // namespace sy
