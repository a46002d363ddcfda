// The trainer's mixed precision (train.precision, Note [mixed precision] in
// runtime/model/moe_model.h) against an independent PyTorch training run
// (tests/train/torch_autocast_oracle.py, Debian's torch at /usr/bin/python3): the same tiny model
// from the same initial f32 weights on the same 200 batches, PyTorch training it with
// torch.autocast("cpu", bfloat16) (or in plain f32), f32 master parameters, clip_grad_norm_ and
// torch.optim.AdamW at Switchyard's learning-rate schedule. Every step's logged loss must stay
// close to PyTorch's.
//
// The case directory the test writes (the oracle's docstring has the details): manifest.json
// (model config with the vocabulary resolved, optim block, steps, precision, the parameters' names,
// shapes and offsets), params.bin (the trainer's initial f32 masters, in checkpoint order) and
// batches.bin (the 200 train batches: tokens and targets i32 [B, T] per step, drawn by the public
// data API exactly as the trainer draws them: CreateDataset, then Batcher::Create with
// MakeBatcherOptions(data, kTrain), Next per step).
//
// What agreement to expect. In f32 both compute the same function in another order of f32
// operations: the losses agree to round-off for the first 50 steps (measured <= 5e-7 relative;
// by step 50 the loss has fallen from 3.37 to 1.78, so the model, the batches, the clipping,
// AdamW and the schedule all take part), and then drift apart slowly (<= 2e-5 to step 125, 0.4%
// at worst over 200 steps) as AdamW's division by sqrt(v) and near ties in the routing amplify
// the round-off. In bf16 the same drift starts from bf16 round-off, ~1e-3, and is amplified the
// same way: every loss agrees within 0.4% for 30 steps, and from step ~40 single steps differ by
// up to 9% (a batch that one trajectory has learned a few steps before the other). That is not a
// defect of either: two torch.autocast runs of this oracle that differ only in one rounding (the
// LM head's logits in f32 instead of bf16) differ just as much (first step over 2%: 42, worst
// 8.4%), and torch's own bf16 against torch's own f32 by up to 16.6%. So "every loss within 2% of
// PyTorch's for 200 steps" holds in f32 but is not attainable in bf16 by any implementation;
// the bf16 test checks what is: every loss within 2% for 30 steps, every 20-step moving mean
// within 5% for 200 (measured 1.7% and 3.0% in two runs; the control above 2.2%), and no step
// beyond 20% (a divergence or a blow-up).
//
// SY_ORACLE_VERBOSE=1 prints every step's two losses; SY_TORCH_AUTOCAST_KEEP=DIR keeps the cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/training/trainer.h"
#include "runtime/data/batcher.h"
#include "runtime/data/data_options.h"
#include "runtime/data/dataset.h"
#include "tests/model/torch_oracle_util.h"
#include "tests/temp_dir.h"

#ifndef SY_TORCH_AUTOCAST_ORACLE
#error "SY_TORCH_AUTOCAST_ORACLE must name tests/train/torch_autocast_oracle.py"
#endif

namespace sy::launcher {
namespace {

using json = nlohmann::json;
using TempDir = sy::testing::TempDir;

constexpr int kSteps = 200;

template <typename T>
void WriteRaw(std::ofstream& out, const T* data, size_t count) {
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(T)));
}

struct Losses {
  std::vector<double> loss, grad_norm;
  double seconds = 0;
};

// Writes the case of `config`'s run into `dir`, runs the oracle on it and the trainer for kSteps
// steps; the oracle's losses in *oracle, the trainer's in *ours.
void RunBoth(const TrainConfig& config, const std::string& precision, const TempDir& dir,
             Losses* oracle, Losses* ours) {
  auto created = Trainer::Create(config);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Trainer& trainer = **created;

  // The initial f32 masters, by name and shape.
  const std::vector<std::vector<float>> values = trainer.ParameterValues();
  const auto params = trainer.CheckpointParameters();
  ASSERT_EQ(values.size(), params.size());
  json tensors = json::array();
  {
    std::ofstream bin(dir / "params.bin", std::ios::binary);
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      int64_t numel = 1;
      for (int64_t d : params[i].second) numel *= d;
      ASSERT_EQ(static_cast<int64_t>(values[i].size()), numel) << params[i].first;
      tensors.push_back(
          {{"name", params[i].first}, {"shape", params[i].second}, {"offset", offset}});
      WriteRaw(bin, values[i].data(), values[i].size());
      offset += numel * static_cast<int64_t>(sizeof(float));
    }
    ASSERT_TRUE(bin.good());
  }

  // The batches the trainer will see: its own dataset and train batcher, drawn the same way.
  auto dataset = CreateDataset(config.data);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  auto batcher = Batcher::Create(dataset->get(), MakeBatcherOptions(config.data, Split::kTrain));
  ASSERT_TRUE(batcher.ok()) << batcher.status().ToString();
  int64_t rows = 0, seq_len = 0;
  {
    std::ofstream bin(dir / "batches.bin", std::ios::binary);
    Batch batch;
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE(batcher->Next(&batch).ok());
      rows = batch.batch_size();
      seq_len = batch.seq_len();
      const size_t n = static_cast<size_t>(rows * seq_len);
      WriteRaw(bin, batch.tokens.data<int32_t>(), n);
      WriteRaw(bin, batch.targets.data<int32_t>(), n);
    }
    ASSERT_TRUE(bin.good());
  }

  const OptimBlock& o = config.optim;
  ASSERT_EQ(o.kind, OptimizerKind::kAdamW);
  const json manifest{
      {"config", sy::testing::ModelConfigJson(trainer.model().config())},
      {"optim",
       {{"kind", "adamw"},
        {"lr", o.lr},
        {"min_lr", o.min_lr},
        {"warmup_steps", o.warmup_steps},
        {"schedule", std::string(LrScheduleKindName(o.schedule))},
        {"beta1", o.beta1},
        {"beta2", o.beta2},
        {"eps", o.eps},
        {"weight_decay", o.weight_decay}}},
      {"train",
       {{"steps", config.train.steps},
        {"grad_clip", config.train.grad_clip},
        {"precision", precision}}},
      {"steps", kSteps},
      {"batch", rows},
      {"seq_len", seq_len},
      // One thread: torch's OpenMP threads spin when the cores are shared (2 threads made the
      // oracle 8x slower on a loaded 2-core machine); the tiny model gains nothing from more.
      {"threads", 1},
      {"tensors", tensors}};
  {
    std::ofstream f(dir / "manifest.json");
    f << manifest.dump(1);
  }

  const std::string cmd = std::string(sy::testing::kOraclePython) + " " + SY_TORCH_AUTOCAST_ORACLE +
                          " " + dir.path() + " > " + (dir / "oracle.log") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string log;
  {
    std::ifstream f(dir / "oracle.log");
    log.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  ASSERT_EQ(rc, 0) << "oracle failed: " << cmd << "\n" << log;
  {
    std::ifstream f(dir / "oracle.json");
    const json out = json::parse(f);
    oracle->loss = out["loss"].get<std::vector<double>>();
    oracle->grad_norm = out["grad_norm"].get<std::vector<double>>();
    oracle->seconds = out["seconds"].get<double>();
  }
  ASSERT_EQ(oracle->loss.size(), static_cast<size_t>(kSteps));
  // SY_TORCH_AUTOCAST_KEEP=DIR keeps a copy of the case (to rerun the oracle by hand).
  if (const char* keep = std::getenv("SY_TORCH_AUTOCAST_KEEP")) {
    const std::filesystem::path to = std::filesystem::path(keep) / precision;
    std::filesystem::create_directories(to);
    std::filesystem::copy(dir.path(), to,
                          std::filesystem::copy_options::overwrite_existing |
                              std::filesystem::copy_options::recursive);
  }

  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < kSteps; ++s) {
    Result<StepReport> r = trainer.Step();
    ASSERT_TRUE(r.ok()) << "step " << s + 1 << ": " << r.status().ToString();
    ASSERT_FALSE(r->skipped) << "step " << s + 1;
    ours->loss.push_back(r->loss);
    ours->grad_norm.push_back(r->grad_norm);
  }
  ours->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double RelativeDifference(double ours, double ref) {
  return std::abs(ours - ref) / std::max(std::abs(ref), 1e-12);
}

// Prints the comparison; returns the worst relative loss difference and its step (1-based).
double Report(const std::string& precision, const Losses& oracle, const Losses& ours,
              int* worst_step) {
  double worst = 0;
  *worst_step = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double d = RelativeDifference(ours.loss[s], oracle.loss[s]);
    if (d > worst) {
      worst = d;
      *worst_step = s + 1;
    }
  }
  std::printf("[%s] step   switchyard      torch          rel.diff   (grad norm: sy / torch)\n",
              precision.c_str());
  for (int step : {1, 2, 10, 50, 100, 150, 200}) {
    const int s = step - 1;
    std::printf("[%s] %4d   %.7f   %.7f   %.2e   (%.5f / %.5f)\n", precision.c_str(), step,
                ours.loss[s], oracle.loss[s], RelativeDifference(ours.loss[s], oracle.loss[s]),
                ours.grad_norm[s], oracle.grad_norm[s]);
  }
  if (std::getenv("SY_ORACLE_VERBOSE") != nullptr) {
    for (int s = 0; s < kSteps; ++s) {
      std::printf("[%s] all %4d %.7f %.7f\n", precision.c_str(), s + 1, ours.loss[s],
                  oracle.loss[s]);
    }
  }
  std::printf("[%s] worst relative loss difference %.3e at step %d; trainer %.2f s, torch %.2f s\n",
              precision.c_str(), worst, *worst_step, ours.seconds, oracle.seconds);
  return worst;
}

TrainConfig TinyConfig(const std::string& precision) {
  Result<TrainConfig> config = LoadTrainConfigFile(
      SY_TINY_CONFIG, {"train.steps=" + std::to_string(kSteps), "train.eval_every=0",
                       "train.threads=2", "log.progress=none", "train.precision=" + precision});
  SY_CHECK(config.ok()) << config.status().message();
  return *config;
}

// The mean of the last `window` losses at each step.
std::vector<double> MovingMean(const std::vector<double>& v, int window) {
  std::vector<double> out;
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (i >= static_cast<size_t>(window)) sum -= v[i - window];
    out.push_back(sum / static_cast<double>(std::min<size_t>(i + 1, window)));
  }
  return out;
}

// bf16: the trainer against torch.autocast(bfloat16) over 200 steps of the tiny config (the
// bounds are explained at the top). The two are different bf16 programs of the same model:
// autocast rounds other tensors than Switchyard's Note [mixed precision] (the LM head's logits and
// the attention scores in bf16; the embeddings and the norm weights in f32).
TEST(TorchAutocastTest, Bf16LossesFollowTorchAutocast) {
  std::string why;
  if (!sy::testing::PythonTorchAvailable(&why)) GTEST_SKIP() << why;
  TempDir dir("torch-autocast-bf16");
  Losses oracle, ours;
  RunBoth(TinyConfig("bf16"), "bf16", dir, &oracle, &ours);
  if (HasFatalFailure()) return;
  int worst_step = 0;
  const double worst = Report("bf16", oracle, ours, &worst_step);
  int over = 0, first_over = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double d = RelativeDifference(ours.loss[s], oracle.loss[s]);
    if (d > 0.02 && over++ == 0) first_over = s + 1;
    EXPECT_LE(d, s < 30 ? 0.02 : 0.20)
        << "step " << s + 1 << ": trainer " << ours.loss[s] << ", torch " << oracle.loss[s];
  }
  const std::vector<double> ours_mean = MovingMean(ours.loss, 20);
  const std::vector<double> oracle_mean = MovingMean(oracle.loss, 20);
  double worst_mean = 0;
  for (int s = 0; s < kSteps; ++s) {
    worst_mean = std::max(worst_mean, RelativeDifference(ours_mean[s], oracle_mean[s]));
    EXPECT_LE(RelativeDifference(ours_mean[s], oracle_mean[s]), 0.05)
        << "20-step mean at step " << s + 1 << ": trainer " << ours_mean[s] << ", torch "
        << oracle_mean[s];
  }
  std::printf(
      "[bf16] %d of %d steps differ by more than 2%% (the first: step %d); worst %.3e; "
      "worst 20-step moving mean %.3e\n",
      over, kSteps, first_over, worst, worst_mean);
}

// f32: the same without autocast (the bounds are explained at the top): the first 50 steps within
// 1e-5 (measured 5e-7), every step within the 2% (measured 0.4%), and the first step's
// gradient norm within 1e-5 (measured 1e-7).
TEST(TorchAutocastTest, F32LossesFollowTorch) {
  std::string why;
  if (!sy::testing::PythonTorchAvailable(&why)) GTEST_SKIP() << why;
  TempDir dir("torch-autocast-f32");
  Losses oracle, ours;
  RunBoth(TinyConfig("f32"), "f32", dir, &oracle, &ours);
  if (HasFatalFailure()) return;
  int worst_step = 0;
  const double worst = Report("f32", oracle, ours, &worst_step);
  EXPECT_LE(RelativeDifference(ours.grad_norm[0], oracle.grad_norm[0]), 1e-5);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LE(RelativeDifference(ours.loss[s], oracle.loss[s]), s < 50 ? 1e-5 : 0.02)
        << "step " << s + 1 << ": trainer " << ours.loss[s] << ", torch " << oracle.loss[s];
  }
  EXPECT_LE(worst, 0.02) << "at step " << worst_step;
}

}  // namespace
}  // namespace sy::launcher
