// Tests of the safetensors writer (storage/formats/safetensors_writer.h), read back by the
// reader (storage/formats/safetensors.h): single files, shards with their index, alignment,
// metadata, and that a failed write leaves no file behind.
#include "storage/formats/safetensors_writer.h"
#include "tests/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace sy::storage {
namespace {

using TempDir = sy::testing::TempDir;

// The names of the files in `dir`, sorted.
std::vector<std::string> Files(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A tensor whose bytes are i * 7 + seed (mod 256).
SafetensorsTensorSource Pattern(std::string name, SafetensorsDType dtype,
                                std::vector<int64_t> shape, uint8_t seed) {
  SafetensorsTensorSource t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.fill = [seed](std::span<uint8_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + seed);
    return Status::Ok();
  };
  return t;
}

void ExpectPattern(const SafetensorsCheckpoint& ckpt, const std::string& name, uint8_t seed,
                   size_t bytes) {
  Result<TensorBytes> t = ckpt.Get(name);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->bytes.size(), bytes) << name;
  for (size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(t->bytes[i], static_cast<uint8_t>(i * 7 + seed)) << name << " byte " << i;
  }
}

TEST(SafetensorsWriterTest, SingleFileRoundTripsAlignedWithMetadata) {
  TempDir dir;
  std::vector<SafetensorsTensorSource> tensors = {
      Pattern("a.bias", SafetensorsDType::kBF16, {3}, 1),
      Pattern("b.weight", SafetensorsDType::kF32, {2, 3}, 2),
      Pattern("c.steps", SafetensorsDType::kI64, {5}, 3),
      Pattern("d.empty", SafetensorsDType::kF16, {0, 4}, 4),
      Pattern("e.scalar", SafetensorsDType::kF32, {}, 5),
  };
  Result<std::vector<std::string>> files = WriteSafetensors(dir.path(), tensors);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(*files, std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(Files(dir), std::vector<std::string>{"model.safetensors"});
  Result<std::unique_ptr<SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ExpectPattern(**ckpt, "a.bias", 1, 6);
  ExpectPattern(**ckpt, "b.weight", 2, 24);
  ExpectPattern(**ckpt, "c.steps", 3, 40);
  ExpectPattern(**ckpt, "d.empty", 4, 0);
  ExpectPattern(**ckpt, "e.scalar", 5, 4);
  const SafetensorsFile& file = *(*ckpt)->files()[0];
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  EXPECT_EQ(file.header().data_offset % 8, 0u);
  for (const SafetensorsTensorInfo& t : file.header().tensors) {
    EXPECT_EQ(t.begin % SafetensorsDTypeSize(t.dtype), 0u) << t.name;
  }
  EXPECT_EQ(file.header().Find("a.bias")->shape, std::vector<int64_t>{3});
  EXPECT_EQ(file.header().Find("e.scalar")->shape, std::vector<int64_t>{});
}

TEST(SafetensorsWriterTest, ShardsAboveTheLimitWithAnIndex) {
  TempDir dir;
  std::vector<SafetensorsTensorSource> tensors;
  for (int i = 0; i < 5; ++i) {
    tensors.push_back(
        Pattern("t" + std::to_string(i), SafetensorsDType::kF32, {10}, static_cast<uint8_t>(i)));
  }
  tensors.push_back(Pattern("big", SafetensorsDType::kF32, {40}, 9));  // over the limit alone
  SafetensorsWriteOptions options;
  options.shard_bytes = 100;  // two 40-byte tensors per shard
  uint64_t last_done = 0, last_total = 0;
  options.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GT(done, last_done);
    last_done = done;
    last_total = total;
  };
  Result<std::vector<std::string>> files = WriteSafetensors(dir.path(), tensors, options);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(*files, (std::vector<std::string>{
                        "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                        "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors",
                        "model.safetensors.index.json"}));
  EXPECT_EQ(last_done, 360u);
  EXPECT_EQ(last_total, 360u);
  Result<std::unique_ptr<SafetensorsCheckpoint>> ckpt = SafetensorsCheckpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->files().size(), 4u);
  for (int i = 0; i < 5; ++i) {
    ExpectPattern(**ckpt, "t" + std::to_string(i), static_cast<uint8_t>(i), 40);
  }
  ExpectPattern(**ckpt, "big", 9, 160);
  std::ifstream in(dir.path() + "/model.safetensors.index.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json index = nlohmann::json::parse(text.str());
  EXPECT_EQ(index["metadata"]["total_size"], 360);
  EXPECT_EQ(index["weight_map"]["big"], "model-00004-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["t4"], "model-00003-of-00004.safetensors");
}

TEST(SafetensorsWriterTest, FailedFillLeavesNoFile) {
  TempDir dir;
  std::vector<SafetensorsTensorSource> tensors = {
      Pattern("ok", SafetensorsDType::kF32, {4}, 1),
      Pattern("bad", SafetensorsDType::kF32, {4}, 2),
  };
  tensors[1].fill = [](std::span<uint8_t>) { return DataLossError("source is corrupt"); };
  Result<std::vector<std::string>> files = WriteSafetensors(dir.path(), tensors);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find("\"bad\""), std::string::npos)
      << files.status().ToString();
  EXPECT_NE(files.status().message().find("model.safetensors"), std::string::npos);
  EXPECT_TRUE(Files(dir).empty());
}

TEST(SafetensorsWriterTest, RejectsBadInput) {
  TempDir dir;
  EXPECT_FALSE(WriteSafetensors(dir.path(), {}).ok());
  EXPECT_FALSE(WriteSafetensors(dir.path(), {Pattern("x", SafetensorsDType::kF32, {1}, 0),
                                             Pattern("x", SafetensorsDType::kF32, {1}, 0)})
                   .ok());
  EXPECT_FALSE(WriteSafetensors(dir.path(), {Pattern("x", SafetensorsDType::kF32, {-1}, 0)}).ok());
  EXPECT_FALSE(
      WriteSafetensors(dir.path(), {Pattern("__metadata__", SafetensorsDType::kF32, {1}, 0)}).ok());
  EXPECT_TRUE(Files(dir).empty());
  Result<std::vector<std::string>> missing =
      WriteSafetensors(dir.path() + "/no/such/dir", {Pattern("x", SafetensorsDType::kF32, {1}, 0)});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no/such/dir"), std::string::npos);
}

}  // namespace
}  // namespace sy::storage
