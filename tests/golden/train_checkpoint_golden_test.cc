// The golden training checkpoint (tests/golden/train_checkpoint.h5; README.md): a tiny model's
// parameters and AdamW moments, with values given by the formulas below, written by
// WriteTrainCheckpoint (launcher/training/train_checkpoint.h, over storage/hdf5).
//   - Written again now from the same state, the file is the golden one byte for byte (the writer
//     stores no object times; the bytes are those of the HDF5 library named by kGoldenHdf5).
//   - Read back with ReadTrainCheckpoint and loaded into a model with LoadTrainedModel, every
//     value is the formula's, so the golden file is right, not just stable; check_golden.py reads
//     it with h5py against the same formulas.
#include <H5public.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "launcher/training/train_checkpoint.h"
#include "launcher/training/trained_model.h"
#include "runtime/backend/backend.h"
#include "runtime/config/config.h"
#include "runtime/model/moe_model.h"
#include "tests/golden/golden_file.h"
#include "tests/inference/decoder_test_util.h"

namespace sy::golden {
namespace {

constexpr char kGoldenFile[] = "train_checkpoint.h5";
// The HDF5 library that wrote the golden bytes (Debian 12's). Another version may lay the same
// content out differently; the byte comparison is skipped there, the value checks still run.
constexpr unsigned kGoldenHdf5[3] = {1, 10, 8};
constexpr int64_t kStep = 3;
constexpr uint64_t kSeed = 0x0123456789ABCDEFull;
constexpr char kDataPosition[] = R"({"epoch":1,"offset":40})";

// The values, by the tensor's name length L and the element's flat index j; exact in f32. The
// same formulas are in check_golden.py.
float ParamValue(size_t name_length, size_t j) {
  return static_cast<float>(static_cast<int>((j + name_length) % 19) - 9) / 8.0f;
}
float MomentM(size_t name_length, size_t j) {
  return static_cast<float>(static_cast<int>((j + 2 * name_length) % 7) - 3) / 64.0f;
}
float MomentV(size_t name_length, size_t j) {
  return static_cast<float>((j + name_length) % 5) / 256.0f;
}

std::string ConfigJson() {
  std::ifstream in(GoldenPath("train_checkpoint_config.json"));
  EXPECT_TRUE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The tiny model of the config: parameter names and shapes in the model's order.
struct ParamList {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
};

ParamList TinyModelParams(Backend& backend) {
  Config config = Config::Parse(ConfigJson(), "train_checkpoint_config.json").value();
  const launcher::TrainConfig train = launcher::LoadTrainConfig(config).value();
  ModelOptions options;
  options.with_grad = false;
  auto model = MoeModel::Create(backend, train.model, options).value();
  ParamList out;
  for (const Parameter& p : model->parameters()) {
    out.names.push_back(p.name);
    const auto dims = p.value.shape().dims();
    out.shapes.emplace_back(dims.begin(), dims.end());
  }
  return out;
}

launcher::CheckpointTensor Filled(const std::string& name, const std::vector<int64_t>& shape,
                                  float (*value)(size_t, size_t)) {
  launcher::CheckpointTensor t{name, shape, {}};
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  for (size_t j = 0; j < static_cast<size_t>(numel); ++j) t.data.push_back(value(name.size(), j));
  return t;
}

launcher::TrainCheckpoint GoldenState(const ParamList& params) {
  launcher::TrainCheckpoint ckpt;
  ckpt.config_json = ConfigJson();
  ckpt.step = kStep;
  ckpt.seed = kSeed;
  ckpt.data_position = kDataPosition;
  for (size_t i = 0; i < params.names.size(); ++i) {
    const std::string& name = params.names[i];
    ckpt.optimizer_steps.push_back(kStep);
    ckpt.params.push_back(Filled(name, params.shapes[i], ParamValue));
    // The moments are keyed by the parameter's name too.
    ckpt.optimizer_m.push_back(Filled(name, params.shapes[i], MomentM));
    ckpt.optimizer_v.push_back(Filled(name, params.shapes[i], MomentV));
  }
  return ckpt;
}

class TrainCheckpointGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = CreateBackend(Device::Cpu()).value();
    params_ = TinyModelParams(*backend_);
    ASSERT_GT(params_.names.size(), 8u);
  }
  std::unique_ptr<Backend> backend_;
  ParamList params_;
};

TEST_F(TrainCheckpointGoldenTest, WriterReproducesTheGoldenBytes) {
  unsigned major = 0, minor = 0, release = 0;
  ASSERT_GE(H5get_libversion(&major, &minor, &release), 0);
  if (!UpdatingGoldens() &&
      (major != kGoldenHdf5[0] || minor != kGoldenHdf5[1] || release != kGoldenHdf5[2])) {
    GTEST_SKIP() << "HDF5 " << major << "." << minor << "." << release
                 << " may lay the file out differently from 1.10.8, which wrote the golden file";
  }
  const std::string dir = ::testing::TempDir() + "sy_golden_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/step-00000003.h5";
  ASSERT_TRUE(launcher::WriteTrainCheckpoint(path, GoldenState(params_)).ok());
  const std::vector<uint8_t> first = ReadFileBytes(path);
  // Written twice, more than a second apart: nothing in the file depends on when it was written.
  ::sleep(1);
  ASSERT_TRUE(launcher::WriteTrainCheckpoint(path, GoldenState(params_)).ok());
  EXPECT_EQ(ReadFileBytes(path), first);
  EXPECT_TRUE(MatchesGolden(first, kGoldenFile));
  std::filesystem::remove_all(dir);
}

TEST_F(TrainCheckpointGoldenTest, GoldenFileHoldsTheFormulaValues) {
  Result<launcher::TrainCheckpoint> read =
      launcher::ReadTrainCheckpoint(GoldenPath(kGoldenFile), params_.names, params_.shapes,
                                    /*with_m=*/true, /*with_v=*/true);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->step, kStep);
  EXPECT_EQ(read->seed, kSeed);
  EXPECT_EQ(read->data_position, kDataPosition);
  EXPECT_EQ(read->config_json, ConfigJson());
  EXPECT_EQ(read->optimizer_steps, std::vector<int64_t>(params_.names.size(), kStep));
  ASSERT_EQ(read->params.size(), params_.names.size());
  for (size_t i = 0; i < params_.names.size(); ++i) {
    const std::string& name = params_.names[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(read->params[i].data, Filled(name, params_.shapes[i], ParamValue).data);
    EXPECT_EQ(read->optimizer_m[i].data, Filled(name, params_.shapes[i], MomentM).data);
    EXPECT_EQ(read->optimizer_v[i].data, Filled(name, params_.shapes[i], MomentV).data);
  }
}

// The path `switchyard generate` takes: the config from meta/config, the model built from it, every
// parameter read by the model's names and checksums.
TEST_F(TrainCheckpointGoldenTest, GoldenFileLoadsIntoTheTinyModel) {
  Result<launcher::TrainedModel> loaded =
      launcher::LoadTrainedModel(*backend_, GoldenPath(kGoldenFile));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->step, kStep);
  EXPECT_EQ(loaded->model->config().vocab_size, 16);
  size_t checked = 0;
  for (const Parameter& p : loaded->model->parameters()) {
    SCOPED_TRACE(p.name);
    const std::vector<float> got = testing::ToHost(*backend_, p.value);
    std::vector<float> want;
    for (size_t j = 0; j < got.size(); ++j) want.push_back(ParamValue(p.name.size(), j));
    EXPECT_EQ(got, want);
    ++checked;
  }
  EXPECT_EQ(checked, params_.names.size());
}

}  // namespace
}  // namespace sy::golden
