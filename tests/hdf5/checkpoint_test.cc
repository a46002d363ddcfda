// Round trips through CheckpointWriter and CheckpointReader: every dtype and rank, names mapped to
// groups, metadata, and the writer's atomic replace and discard.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "runtime/core/dtype.h"
#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/checkpoint_reader.h"
#include "storage/hdf5/checkpoint_writer.h"
#include "tests/hdf5/checkpoint_test_util.h"

namespace sy {
namespace {

using testing::Pattern;
using testing::ScratchDir;

std::unique_ptr<CheckpointWriter> NewWriter(const std::string& path,
                                            const CheckpointWriterOptions& options = {}) {
  auto writer = CheckpointWriter::Create(path, options);
  SY_CHECK(writer.ok()) << writer.status().ToString();
  return std::move(writer).value();
}

std::unique_ptr<CheckpointReader> OpenReader(const std::string& path) {
  auto reader = CheckpointReader::Open(path);
  SY_CHECK(reader.ok()) << reader.status().ToString();
  return std::move(reader).value();
}

TEST(CheckpointTest, RoundTripsEveryDTypeAndRank) {
  ScratchDir dir;
  const std::string path = dir.File("all.h5");
  std::vector<float> f32 = Pattern(2 * 3 * 4, 1.0f);
  std::vector<BF16> bf16(7);
  std::vector<F16> f16(7);
  for (int i = 0; i < 7; ++i) {
    bf16[i] = F32ToBF16(0.1f * i - 0.3f);
    f16[i] = F32ToF16(-0.5f * i);
  }
  std::vector<int32_t> i32 = {-5, 0, 7, 2147483647};
  std::vector<int64_t> i64 = {-1, int64_t{1} << 40};
  std::vector<uint8_t> u8 = {0, 1, 255};
  std::vector<int8_t> i8 = {-128, 0, 127};
  float scalar = 3.5f;
  std::vector<float> rank6(64);
  std::iota(rank6.begin(), rank6.end(), 0.0f);

  auto writer = NewWriter(path);
  ASSERT_TRUE(writer->AddTensor("params/embed", DType::kF32, Shape{2, 3, 4}, f32.data()).ok());
  ASSERT_TRUE(
      writer->AddTensor("params/layers/0/attn/wq", DType::kBF16, Shape{7}, bf16.data()).ok());
  ASSERT_TRUE(writer->AddTensor("params/layers/0/norm", DType::kF16, Shape{7, 1}, f16.data()).ok());
  ASSERT_TRUE(writer->AddTensor("ints/i32", DType::kI32, Shape{2, 2}, i32.data()).ok());
  ASSERT_TRUE(writer->AddTensor("ints/i64", DType::kI64, Shape{2}, i64.data()).ok());
  ASSERT_TRUE(writer->AddTensor("ints/u8", DType::kU8, Shape{3}, u8.data()).ok());
  ASSERT_TRUE(writer->AddTensor("ints/i8", DType::kI8, Shape{3}, i8.data()).ok());
  ASSERT_TRUE(writer->AddTensor("scalar", DType::kF32, Shape{}, &scalar).ok());
  ASSERT_TRUE(writer->AddTensor("empty", DType::kF32, Shape{0, 5}, nullptr).ok());
  ASSERT_TRUE(writer->AddTensor("rank6", DType::kF32, Shape{2, 2, 2, 2, 2, 2}, rank6.data()).ok());
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_FALSE(std::filesystem::exists(writer->temp_path()));

  auto reader = OpenReader(path);
  EXPECT_EQ(reader->TensorNames(),
            (std::vector<std::string>{"empty", "ints/i32", "ints/i64", "ints/i8", "ints/u8",
                                      "params/embed", "params/layers/0/attn/wq",
                                      "params/layers/0/norm", "rank6", "scalar"}));
  const CheckpointTensorInfo* info = reader->FindTensor("params/layers/0/attn/wq");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->dtype, DType::kBF16);
  EXPECT_EQ(info->shape, (Shape{7}));
  EXPECT_EQ(reader->FindTensor("scalar")->shape.rank(), 0);
  EXPECT_EQ(reader->FindTensor("empty")->shape, (Shape{0, 5}));

  std::vector<float> f32_back(f32.size());
  ASSERT_TRUE(
      reader->ReadTensor("params/embed", DType::kF32, Shape{2, 3, 4}, f32_back.data()).ok());
  EXPECT_EQ(f32_back, f32);
  std::vector<BF16> bf16_back(7);
  ASSERT_TRUE(
      reader->ReadTensor("params/layers/0/attn/wq", DType::kBF16, Shape{7}, bf16_back.data()).ok());
  EXPECT_EQ(std::memcmp(bf16_back.data(), bf16.data(), 14), 0);
  std::vector<F16> f16_back(7);
  ASSERT_TRUE(
      reader->ReadTensor("params/layers/0/norm", DType::kF16, Shape{7, 1}, f16_back.data()).ok());
  EXPECT_EQ(std::memcmp(f16_back.data(), f16.data(), 14), 0);
  std::vector<int32_t> i32_back(4);
  ASSERT_TRUE(reader->ReadTensor("ints/i32", DType::kI32, Shape{2, 2}, i32_back.data()).ok());
  EXPECT_EQ(i32_back, i32);
  std::vector<int64_t> i64_back(2);
  ASSERT_TRUE(reader->ReadTensor("ints/i64", DType::kI64, Shape{2}, i64_back.data()).ok());
  EXPECT_EQ(i64_back, i64);
  std::vector<uint8_t> u8_back(3);
  ASSERT_TRUE(reader->ReadTensor("ints/u8", DType::kU8, Shape{3}, u8_back.data()).ok());
  EXPECT_EQ(u8_back, u8);
  std::vector<int8_t> i8_back(3);
  ASSERT_TRUE(reader->ReadTensor("ints/i8", DType::kI8, Shape{3}, i8_back.data()).ok());
  EXPECT_EQ(i8_back, i8);
  float scalar_back = 0;
  ASSERT_TRUE(reader->ReadTensor("scalar", DType::kF32, Shape{}, &scalar_back).ok());
  EXPECT_EQ(scalar_back, 3.5f);
  EXPECT_TRUE(reader->ReadTensor("empty", DType::kF32, Shape{0, 5}, nullptr).ok());
  std::vector<float> rank6_back(64);
  ASSERT_TRUE(
      reader->ReadTensor("rank6", DType::kF32, Shape{2, 2, 2, 2, 2, 2}, rank6_back.data()).ok());
  EXPECT_EQ(rank6_back, rank6);
}

TEST(CheckpointTest, HostTensorsAndStandardNames) {
  ScratchDir dir;
  const std::string path = dir.File("model.h5");
  Tensor wq = Tensor::Host(DType::kF32, Shape{4, 8});
  for (int64_t i = 0; i < wq.numel(); ++i) wq.data<float>()[i] = static_cast<float>(i) * 0.5f;
  Tensor expert = Tensor::Host(DType::kBF16, Shape{8, 4});
  for (int64_t i = 0; i < expert.numel(); ++i) expert.data<BF16>()[i] = F32ToBF16(float(i));

  auto writer = NewWriter(path);
  const std::string expert_name = ExpertTensorName(3, 17, "w_gate");
  EXPECT_EQ(expert_name, "experts/layer3/expert17/w_gate");
  const std::string m_name = OptimizerStateName("m", "params/layers/0/attn/wq");
  EXPECT_EQ(m_name, "optim/m/params/layers/0/attn/wq");
  ASSERT_TRUE(writer->AddTensor("params/layers/0/attn/wq", wq).ok());
  ASSERT_TRUE(writer->AddTensor(expert_name, expert).ok());
  ASSERT_TRUE(writer->AddTensor(m_name, wq).ok());
  ASSERT_TRUE(writer->AddTensor(OptimizerStateName("v", "params/layers/0/attn/wq"), wq).ok());
  ASSERT_TRUE(writer->AddTensor(OptimizerStateName("master", expert_name), wq).ok());
  ASSERT_TRUE(writer->Commit().ok());

  auto reader = OpenReader(path);
  Tensor wq_back = Tensor::Host(DType::kF32, Shape{4, 8});
  ASSERT_TRUE(reader->ReadTensor(m_name, wq_back).ok());
  EXPECT_EQ(std::memcmp(wq_back.data(), wq.data(), wq.nbytes()), 0);
  Tensor expert_back = Tensor::Host(DType::kBF16, Shape{8, 4});
  ASSERT_TRUE(reader->ReadTensor(expert_name, expert_back).ok());
  EXPECT_EQ(std::memcmp(expert_back.data(), expert.data(), expert.nbytes()), 0);
  EXPECT_NE(reader->FindTensor("optim/master/experts/layer3/expert17/w_gate"), nullptr);
}

TEST(CheckpointTest, MetadataStepAndShards) {
  ScratchDir dir;
  const std::string path = dir.File("meta.h5");
  const std::string config = R"({"train": {"steps": 100}, "model": {"num_experts": 8}})";
  const std::vector<uint8_t> rng = {0, 1, 2, 0, 255, 0};
  std::string with_nuls("a\0b\0\0", 5);

  CheckpointWriterOptions options;
  options.shard_index = 1;
  options.num_shards = 4;
  auto writer = NewWriter(path, options);
  writer->SetStep(12345);
  ASSERT_TRUE(writer->SetText(kCheckpointConfigKey, config).ok());
  ASSERT_TRUE(writer->SetBytes(kCheckpointRngStateKey, rng).ok());
  ASSERT_TRUE(writer->SetText(kCheckpointDataPositionKey, "").ok());
  ASSERT_TRUE(writer->SetText("nuls", with_nuls).ok());
  ASSERT_TRUE(writer->SetBytes("empty_bytes", {}).ok());
  EXPECT_EQ(writer->SetText(kCheckpointConfigKey, "again").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(writer->SetText("a/b", "x").code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(writer->Commit().ok());

  auto reader = OpenReader(path);
  EXPECT_EQ(reader->step(), 12345);
  EXPECT_EQ(reader->shard_index(), 1);
  EXPECT_EQ(reader->num_shards(), 4);
  EXPECT_EQ(reader->format_version(), kCheckpointFormatVersion);
  EXPECT_TRUE(reader->TensorNames().empty()) << "metadata is not listed as tensors";
  EXPECT_EQ(reader->MetadataKeys(), (std::vector<std::string>{"config", "data_position",
                                                              "empty_bytes", "nuls", "rng_state"}));
  EXPECT_EQ(*reader->ReadText(kCheckpointConfigKey), config);
  EXPECT_EQ(*reader->ReadBytes(kCheckpointRngStateKey), rng);
  EXPECT_EQ(*reader->ReadText(kCheckpointDataPositionKey), "");
  EXPECT_EQ(*reader->ReadText("nuls"), with_nuls);
  EXPECT_TRUE(reader->ReadBytes("empty_bytes")->empty());
  Result<std::string> missing = reader->ReadText("optimizer");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "checkpoint " + path +
                ": has no metadata 'optimizer'; it has: config, data_position, empty_bytes, nuls, "
                "rng_state");
}

TEST(CheckpointTest, ShapeDtypeAndNameErrorsAreClear) {
  ScratchDir dir;
  const std::string path = dir.File("errors.h5");
  std::vector<float> embed = Pattern(100 * 64, 2.0f);
  auto writer = NewWriter(path);
  ASSERT_TRUE(writer->AddTensor("params/embed", DType::kF32, Shape{100, 64}, embed.data()).ok());
  ASSERT_TRUE(writer->Commit().ok());

  auto reader = OpenReader(path);
  std::vector<float> out(128 * 64);
  Status shape = reader->ReadTensor("params/embed", DType::kF32, Shape{128, 64}, out.data());
  EXPECT_EQ(shape.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shape.message(), "checkpoint " + path +
                                 ": tensor 'params/embed' has shape [100, 64], the model expects "
                                 "[128, 64]");
  Status dtype = reader->ReadTensor("params/embed", DType::kBF16, Shape{100, 64}, out.data());
  EXPECT_EQ(dtype.message(),
            "checkpoint " + path + ": tensor 'params/embed' has dtype f32, the model expects bf16");
  Status missing = reader->ReadTensor("params/embd", DType::kF32, Shape{100, 64}, out.data());
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.message(),
            "checkpoint " + path + ": has no tensor 'params/embd'; did you mean 'params/embed'?");
  Status far = reader->ReadTensor("experts/layer0/expert0/w_up", DType::kF32, Shape{1}, out.data());
  EXPECT_EQ(
      far.message(),
      "checkpoint " + path + ": has no tensor 'experts/layer0/expert0/w_up' (it holds 1 tensors)");
  // The failed reads wrote nothing.
  EXPECT_EQ(out[0], 0.0f);
}

TEST(CheckpointTest, WriterRejectsBadNamesAndDuplicates) {
  ScratchDir dir;
  auto writer = NewWriter(dir.File("names.h5"));
  float x = 1.0f;
  for (const char* bad : {"", "/params/x", "params/x/", "params//x", "params/./x", "a/../b",
                          "meta/config", "meta", "tab\there"}) {
    Status status = writer->AddTensor(bad, DType::kF32, Shape{1}, &x);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  ASSERT_TRUE(writer->AddTensor("params/x", DType::kF32, Shape{1}, &x).ok());
  Status twice = writer->AddTensor("params/x", DType::kF32, Shape{1}, &x);
  EXPECT_EQ(twice.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(twice.message().find("already added"), std::string::npos);
  Status through = writer->AddTensor("params/x/y", DType::kF32, Shape{1}, &x);
  EXPECT_EQ(through.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(through.message().find("runs through tensor 'params/x'"), std::string::npos)
      << through.message();
  Status group = writer->AddTensor("params", DType::kF32, Shape{1}, &x);
  EXPECT_EQ(group.code(), StatusCode::kAlreadyExists);

  Tensor device = Tensor::Wrap(&x, DType::kF32, Shape{1}, Device::Sim());
  Status on_device = writer->AddTensor("params/dev", device);
  EXPECT_EQ(on_device.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(on_device.message().find("copy it to host memory"), std::string::npos);
  ASSERT_TRUE(writer->Commit().ok());
  EXPECT_EQ(writer->AddTensor("late", DType::kF32, Shape{1}, &x).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(writer->Commit().code(), StatusCode::kFailedPrecondition);
}

TEST(CheckpointTest, CommitReplacesAndDiscardLeavesNoTrace) {
  ScratchDir dir;
  const std::string path = dir.File("ckpt.h5");
  std::vector<float> first = Pattern(10, 1.0f);
  std::vector<float> second = Pattern(10, 2.0f);
  {
    auto writer = NewWriter(path);
    writer->SetStep(1);
    ASSERT_TRUE(writer->AddTensor("w", DType::kF32, Shape{10}, first.data()).ok());
    ASSERT_TRUE(writer->Commit().ok());
  }
  std::string temp;
  {
    // Destroyed without Commit: the previous checkpoint stays, the temporary file goes.
    auto writer = NewWriter(path);
    temp = writer->temp_path();
    EXPECT_EQ(temp.rfind(path + ".tmp." + std::to_string(::getpid()) + ".", 0), 0u) << temp;
    ASSERT_TRUE(writer->AddTensor("w", DType::kF32, Shape{10}, second.data()).ok());
    EXPECT_TRUE(std::filesystem::exists(temp));
  }
  EXPECT_FALSE(std::filesystem::exists(temp));
  {
    auto reader = OpenReader(path);
    EXPECT_EQ(reader->step(), 1);
  }
  {
    auto writer = NewWriter(path);
    writer->SetStep(2);
    ASSERT_TRUE(writer->AddTensor("w", DType::kF32, Shape{10}, second.data()).ok());
    // Before Commit, readers still see the previous checkpoint.
    auto before = OpenReader(path);
    EXPECT_EQ(before->step(), 1);
    ASSERT_TRUE(writer->Commit().ok());
  }
  auto reader = OpenReader(path);
  EXPECT_EQ(reader->step(), 2);
  std::vector<float> back(10);
  ASSERT_TRUE(reader->ReadTensor("w", DType::kF32, Shape{10}, back.data()).ok());
  EXPECT_EQ(back, second);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    files.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(files, std::vector<std::string>{"ckpt.h5"}) << "no temporary files left";
}

TEST(CheckpointTest, CreateInMissingDirectoryNamesTheFile) {
  auto writer = CheckpointWriter::Create("/nonexistent/dir/ckpt.h5");
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), StatusCode::kNotFound);
  EXPECT_NE(writer.status().message().find("/nonexistent/dir/ckpt.h5"), std::string::npos);
  EXPECT_NE(writer.status().message().find("No such file or directory"), std::string::npos)
      << writer.status().message();
  EXPECT_FALSE(CheckpointWriter::Create("/tmp/x.h5", {.shard_index = 2, .num_shards = 2}).ok());
}

TEST(CheckpointLayoutTest, NameValidation) {
  EXPECT_TRUE(ValidateTensorName("params/layers/0/attn/wq").ok());
  EXPECT_TRUE(ValidateTensorName("metadata/x").ok()) << "only the exact part 'meta' is reserved";
  EXPECT_TRUE(ValidateTensorName("x").ok());
  EXPECT_FALSE(ValidateTensorName("meta/x").ok());
  EXPECT_TRUE(ValidateMetadataKey("config").ok());
  EXPECT_FALSE(ValidateMetadataKey("").ok());
  EXPECT_FALSE(ValidateMetadataKey("a/b").ok());
}

}  // namespace
}  // namespace sy
