// Tests of the "data" config block: binding, overrides such as data.tasks.copy.weight=2, checks
// that name the file and key, and the dataset factory.
#include "runtime/data/data_options.h"

#include <gtest/gtest.h>

#include "runtime/config/config.h"

namespace sy {
namespace {

Result<DataOptions> Bind(const std::string& text, std::vector<std::string> sets = {}) {
  SY_ASSIGN_OR_RETURN(Config config, Config::Parse(text, "run.json"));
  SY_RETURN_IF_ERROR(config.ApplyOverrides(sets));
  DataOptions options;
  SY_RETURN_IF_ERROR(DataOptionsSchema().Bind(config, "data", &options));
  return options;
}

TEST(DataOptionsTest, DefaultsMakeASyntheticDataset) {
  Result<DataOptions> options = Bind("{}");
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->source, DataSource::kSynthetic);
  auto dataset = CreateDataset(*options);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  EXPECT_EQ((*dataset)->name(), "synthetic");
  EXPECT_EQ((*dataset)->seq_len(), 64);
  EXPECT_EQ((*dataset)->num_tasks(), 5);
}

TEST(DataOptionsTest, OverridesSetTaskWeights) {
  Result<DataOptions> options =
      Bind(R"({"data": {"seq_len": 40, "tasks": {"sort": {"weight": 0}}}})",
           {"data.tasks.copy.weight=2", "data.synthetic.max_len=6"});
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->seq_len, 40);
  EXPECT_DOUBLE_EQ(options->tasks.copy.weight, 2.0);
  EXPECT_DOUBLE_EQ(options->tasks.sort.weight, 0.0);
  EXPECT_EQ(options->synthetic.max_len, 6);
  auto dataset = CreateDataset(*options);
  ASSERT_TRUE(dataset.ok());
  auto* synthetic = dynamic_cast<SyntheticDataset*>(dataset->get());
  ASSERT_NE(synthetic, nullptr);
  EXPECT_EQ(synthetic->task_weights(), (std::array<double, 5>{2, 1, 0, 1, 1}));
}

TEST(DataOptionsTest, ErrorsNameFileAndKey) {
  EXPECT_EQ(Bind("{}", {"data.tasks.cpy.weight=2"}).status().message(),
            "config run.json: --set data.tasks.cpy.weight=2: unknown key 'data.tasks.cpy'; did "
            "you mean 'data.tasks.copy'?");
  EXPECT_EQ(Bind(R"({"data": {"seq_len": 16}})").status().message(),
            "config run.json: 'data.synthetic.max_len' must be at most (seq_len - 2) / 2 = 7 so a "
            "copy example (tag, input, SEP, answer, EOS) fits seq_len 16, got 8");
  EXPECT_EQ(Bind(R"({"data": {"source": "tokens"}})").status().message(),
            "config run.json: 'data.path' must name the data file when source is \"tokens\" or "
            "\"text\"");
  EXPECT_EQ(Bind(R"({"data": {"token_dtype": "u8"}})").status().message(),
            "config run.json: 'data.token_dtype' must be one of \"u16\", \"u32\", got string "
            "\"u8\"; did you mean \"u16\"?");
  EXPECT_EQ(Bind("{}", {"data.tasks.modadd.weight=-1"}).status().message(),
            "config run.json: --set data.tasks.modadd.weight=-1: 'data.tasks.modadd.weight' must "
            "be >= 0, got integer -1");
}

TEST(DataOptionsTest, FileSourcesOpenTheirFile) {
  Result<DataOptions> options =
      Bind(R"({"data": {"source": "text", "path": "/nonexistent/corpus.txt"}})");
  ASSERT_TRUE(options.ok());
  auto dataset = CreateDataset(*options);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), StatusCode::kNotFound);
  EXPECT_NE(dataset.status().message().find("/nonexistent/corpus.txt"), std::string::npos);
}

TEST(DataOptionsTest, BatcherOptionsNeverShuffleEval) {
  DataOptions options;
  options.batch_size = 5;
  options.seed = 77;
  BatcherOptions train = MakeBatcherOptions(options, Split::kTrain, 4, 1);
  EXPECT_EQ(train.batch_size, 5);
  EXPECT_EQ(train.seed, 77u);
  EXPECT_TRUE(train.shuffle);
  EXPECT_EQ(train.num_shards, 4);
  EXPECT_EQ(train.shard, 1);
  EXPECT_FALSE(MakeBatcherOptions(options, Split::kEval).shuffle);
}

}  // namespace
}  // namespace sy
