// CheckpointSet: a sharded checkpoint (a directory of shard-I-of-N.h5 files) reads as one, a single
// file as itself, and a set of shards that is not one checkpoint is refused, naming the shard and
// the fix. Also the layout's shard file names and expert ids of tensor names.
#include "storage/hdf5/checkpoint_set.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/checkpoint_writer.h"
#include "tests/hdf5/checkpoint_test_util.h"

namespace sy {
namespace {

using testing::Pattern;
using testing::ScratchDir;

// Writes shard `index` of `count` at `path`: each tensor name gets Pattern(6, seed) as [2, 3].
void WriteShard(const std::string& path, int index, int count, int64_t step,
                const std::vector<std::string>& tensors, float seed,
                const std::string& config = R"({"model": {}})") {
  auto writer = CheckpointWriter::Create(path, {.shard_index = index, .num_shards = count});
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  for (const std::string& name : tensors) {
    const std::vector<float> data = Pattern(6, seed);
    ASSERT_TRUE((*writer)->AddTensor(name, DType::kF32, Shape{2, 3}, data.data()).ok());
  }
  (*writer)->SetStep(step);
  ASSERT_TRUE((*writer)->SetText(kCheckpointConfigKey, config).ok());
  ASSERT_TRUE((*writer)->Commit().ok());
}

std::string ShardPath(const ScratchDir& dir, int index, int count) {
  return dir.File(CheckpointShardFileName(index, count));
}

Status OpenStatus(const std::string& path) { return CheckpointSet::Open(path).status(); }

TEST(CheckpointLayoutTest, ShardFileNames) {
  EXPECT_EQ(CheckpointShardFileName(2, 4), "shard-00002-of-00004.h5");
  int index = -1, count = -1;
  ASSERT_TRUE(ParseCheckpointShardFileName("shard-00002-of-00004.h5", &index, &count));
  EXPECT_EQ(index, 2);
  EXPECT_EQ(count, 4);
  ASSERT_TRUE(
      ParseCheckpointShardFileName(CheckpointShardFileName(123456, 200000), &index, &count));
  EXPECT_EQ(index, 123456);
  EXPECT_EQ(count, 200000);
  for (const char* bad : {"shard-2-of-4.h5", "shard-00004-of-00004.h5", "shard-00000-of-00000.h5",
                          "shard-00000-of-00004.h5.tmp.12", "xshard-00000-of-00004.h5",
                          "shard-0000a-of-00004.h5", "shard-00000-00004.h5", "shard-.h5",
                          "shard-00000-of-9999999999.h5", "step-00000004.h5", ""}) {
    EXPECT_FALSE(ParseCheckpointShardFileName(bad, &index, &count)) << bad;
  }
}

TEST(CheckpointLayoutTest, ExpertOfTensorName) {
  EXPECT_EQ(ExpertOfTensorName(ExpertTensorName(3, 17, "w_up")), 17);
  EXPECT_EQ(ExpertOfTensorName("optim/m/experts/layer0/expert5/w_gate"), 5);
  EXPECT_EQ(ExpertOfTensorName("optim/v/experts/layer12/expert0/w_down"), 0);
  for (const char* other :
       {"embed_tokens", "optim/m/embed_tokens", "optim/steps", "layers/0/moe/router",
        "experts/layer0/expert/w_up", "experts/layer0/expertx/w_up", "experts/layer0/expert3",
        "experts/layer0/expert99999999999/w_up",
        "optim/x/experts/layer0/"
        "expert1/w_up"}) {
    EXPECT_EQ(ExpertOfTensorName(other), -1) << other;
  }
}

TEST(CheckpointSetTest, ShardsReadAsOneCheckpoint) {
  ScratchDir dir;
  WriteShard(ShardPath(dir, 0, 2), 0, 2, 7, {"embed_tokens", "experts/layer0/expert0/w_up"}, 1.0f);
  WriteShard(ShardPath(dir, 1, 2), 1, 2, 7, {"experts/layer0/expert1/w_up"}, 2.0f);
  EXPECT_TRUE(CheckpointSet::IsShardedCheckpointDir(dir.path().string()));
  auto set = CheckpointSet::Open(dir.path().string());
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ((*set)->num_shards(), 2);
  EXPECT_EQ((*set)->step(), 7);
  ASSERT_EQ((*set)->tensors().size(), 3u);
  EXPECT_EQ((*set)->tensors()[0].name, "embed_tokens");  // sorted over all shards
  EXPECT_EQ((*set)->FileOf("experts/layer0/expert1/w_up"), ShardPath(dir, 1, 2));
  std::vector<float> got(6);
  ASSERT_TRUE(
      (*set)->ReadTensor("experts/layer0/expert1/w_up", DType::kF32, Shape{2, 3}, got.data()).ok());
  EXPECT_EQ(got, Pattern(6, 2.0f));
  Status missing = (*set)->ReadTensor("nope", DType::kF32, Shape{2, 3}, got.data());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound) << missing.ToString();
  auto config = (*set)->ReadText(kCheckpointConfigKey);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(*config, R"({"model": {}})");
}

TEST(CheckpointSetTest, ASingleFileIsItsOwnSet) {
  ScratchDir dir;
  WriteShard(dir.File("step-00000003.h5"), 0, 1, 3, {"embed_tokens"}, 1.0f);
  auto set = CheckpointSet::Open(dir.File("step-00000003.h5"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ((*set)->num_shards(), 1);
  EXPECT_NE((*set)->FindTensor("embed_tokens"), nullptr);
  EXPECT_FALSE(CheckpointSet::IsShardedCheckpointDir(dir.path().string()));
  EXPECT_FALSE(CheckpointSet::IsShardedCheckpointDir(dir.File("step-00000003.h5")));
}

TEST(CheckpointSetTest, OneShardAloneIsRefused) {
  ScratchDir dir;
  WriteShard(ShardPath(dir, 1, 2), 1, 2, 7, {"a"}, 1.0f);
  Status s = OpenStatus(ShardPath(dir, 1, 2));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("is shard 1 of 2 of a sharded checkpoint; open its directory"),
            std::string::npos)
      << s.ToString();
}

TEST(CheckpointSetTest, SetsThatAreNotOneCheckpointAreRefused) {
  {
    ScratchDir dir;  // shard 1 of 2 missing
    WriteShard(ShardPath(dir, 0, 2), 0, 2, 7, {"a"}, 1.0f);
    Status s = OpenStatus(dir.path().string());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("shard-00001-of-00002.h5 is missing"), std::string::npos)
        << s.ToString();
  }
  {
    ScratchDir dir;  // two sets in one directory
    WriteShard(ShardPath(dir, 0, 2), 0, 2, 7, {"a"}, 1.0f);
    WriteShard(ShardPath(dir, 0, 3), 0, 3, 7, {"b"}, 1.0f);
    Status s = OpenStatus(dir.path().string());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("it mixes two checkpoints"), std::string::npos) << s.ToString();
  }
  {
    ScratchDir dir;  // a tensor in two shards
    WriteShard(ShardPath(dir, 0, 2), 0, 2, 7, {"a"}, 1.0f);
    WriteShard(ShardPath(dir, 1, 2), 1, 2, 7, {"a"}, 2.0f);
    Status s = OpenStatus(dir.path().string());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("tensor 'a' is also in " + ShardPath(dir, 0, 2)), std::string::npos)
        << s.ToString();
  }
  {
    ScratchDir dir;  // shards of two steps
    WriteShard(ShardPath(dir, 0, 2), 0, 2, 7, {"a"}, 1.0f);
    WriteShard(ShardPath(dir, 1, 2), 1, 2, 8, {"b"}, 2.0f);
    Status s = OpenStatus(dir.path().string());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("belong to different checkpoints (step 8 and 7)"), std::string::npos)
        << s.ToString();
  }
  {
    ScratchDir dir;  // shards of two runs' configs
    WriteShard(ShardPath(dir, 0, 2), 0, 2, 7, {"a"}, 1.0f);
    WriteShard(ShardPath(dir, 1, 2), 1, 2, 7, {"b"}, 2.0f, R"({"model": {"x": 1}})");
    Status s = OpenStatus(dir.path().string());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("another meta/config"), std::string::npos) << s.ToString();
  }
  {
    ScratchDir dir;  // a shard renamed: its attributes say 0, its name 1
    WriteShard(ShardPath(dir, 0, 2), 0, 2, 7, {"a"}, 1.0f);
    WriteShard(dir.File("elsewhere.h5"), 0, 2, 7, {"b"}, 2.0f);
    std::filesystem::rename(dir.File("elsewhere.h5"), ShardPath(dir, 1, 2));
    Status s = OpenStatus(dir.path().string());
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("says it is shard 0 of 2, its name says otherwise"),
              std::string::npos)
        << s.ToString();
  }
  {
    ScratchDir dir;  // no shard at all
    Status s = OpenStatus(dir.path().string());
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  }
}

}  // namespace
}  // namespace sy
