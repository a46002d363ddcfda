// The trainer: the tiny config learns the synthetic tasks, resume is bit-exact, and missing,
// truncated or mismatched checkpoints are clear errors; the loop's handling of checkpoint.dir
// (lock, stale temporaries, resume past a damaged checkpoint) and of a stop request.
#include "launcher/training/trainer.h"
#include "launcher/training/training_loop.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>

#include <map>
#include <set>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/training/directory_lock.h"
#include "tests/temp_dir.h"

namespace sy::launcher {
namespace {

// A fresh empty directory under the test temp dir, removed at the end of the test.
using TempDir = sy::testing::TempDir;

TrainConfig LoadTiny(std::vector<std::string> sets) {
  sets.push_back("log.progress=none");
  Result<TrainConfig> config = LoadTrainConfigFile(SY_TINY_CONFIG, sets);
  SY_CHECK(config.ok()) << config.status().message();
  return *config;
}

int TaskIndex(const Dataset& dataset, std::string_view name) {
  for (int t = 0; t < dataset.num_tasks(); ++t) {
    if (dataset.task_name(t) == name) return t;
  }
  return -1;
}

TEST(TrainerTest, TinyConfigLearnsCopyAndModularAddition) {
  const auto start = std::chrono::steady_clock::now();
  auto trainer = Trainer::Create(LoadTiny({"train.eval_batches=16", "train.threads=2"}));
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  std::FILE* sink = std::tmpfile();
  Result<TrainingOutcome> outcome = RunTrainingLoop(**trainer, sink);
  std::fclose(sink);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  ASSERT_TRUE(outcome->final_eval.has_value());
  const EvalReport* result = &*outcome->final_eval;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("tiny: %lld steps in %.1fs: %s\n", static_cast<long long>((*trainer)->step()),
              seconds, result->summary.c_str());
  const Dataset& dataset = (*trainer)->dataset();
  const TaskAccuracyStats copy = result->accuracy.task(TaskIndex(dataset, "copy"));
  const TaskAccuracyStats modadd = result->accuracy.task(TaskIndex(dataset, "modadd"));
  ASSERT_GT(copy.examples, 50);
  ASSERT_GT(modadd.examples, 50);
  EXPECT_GE(copy.exact_match(), 0.95);
  // Chance is 1/modulus for the whole answer.
  const double chance = 1.0 / (*trainer)->config().data.synthetic.modulus;
  EXPECT_GE(modadd.exact_match(), 3 * chance);
}

TEST(TrainerTest, ResumeIsBitExact) {
  TempDir dir("resume");
  const std::vector<std::string> sets = {"train.steps=20", "train.eval_every=0", "train.threads=2",
                                         "optim.warmup_steps=5"};
  std::vector<float> straight_losses;
  std::vector<std::vector<float>> straight_params;
  {
    auto t = Trainer::Create(LoadTiny(sets));
    ASSERT_TRUE(t.ok()) << t.status().message();
    for (int i = 0; i < 20; ++i) {
      auto r = (*t)->Step();
      ASSERT_TRUE(r.ok()) << r.status().message();
      straight_losses.push_back(r->loss);
    }
    straight_params = (*t)->ParameterValues();
  }
  const std::string ckpt = dir / "step-00000010.h5";
  std::vector<float> resumed_losses;
  {
    auto t = Trainer::Create(LoadTiny(sets));
    ASSERT_TRUE(t.ok());
    for (int i = 0; i < 10; ++i) {
      auto r = (*t)->Step();
      ASSERT_TRUE(r.ok());
      resumed_losses.push_back(r->loss);
    }
    ASSERT_TRUE((*t)->SaveCheckpoint(ckpt).ok());
  }
  auto t = Trainer::Create(LoadTiny(sets));
  ASSERT_TRUE(t.ok());
  Status loaded = (*t)->LoadCheckpoint(ckpt);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  EXPECT_EQ((*t)->step(), 10);
  for (int i = 0; i < 10; ++i) {
    auto r = (*t)->Step();
    ASSERT_TRUE(r.ok());
    resumed_losses.push_back(r->loss);
  }
  ASSERT_EQ(resumed_losses.size(), straight_losses.size());
  for (size_t i = 0; i < straight_losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&resumed_losses[i], &straight_losses[i], sizeof(float)), 0)
        << "step " << i + 1 << ": " << resumed_losses[i] << " vs " << straight_losses[i];
  }
  const std::vector<std::vector<float>> resumed_params = (*t)->ParameterValues();
  ASSERT_EQ(resumed_params.size(), straight_params.size());
  for (size_t p = 0; p < straight_params.size(); ++p) {
    ASSERT_EQ(resumed_params[p].size(), straight_params[p].size());
    EXPECT_EQ(std::memcmp(resumed_params[p].data(), straight_params[p].data(),
                          straight_params[p].size() * sizeof(float)),
              0)
        << "parameter " << p;
  }
  // The parameters moved: the comparison above is not between two untouched initialisations.
  auto fresh = Trainer::Create(LoadTiny(sets));
  ASSERT_TRUE(fresh.ok());
  const auto init = (*fresh)->ParameterValues();
  EXPECT_NE(std::memcmp(init[0].data(), straight_params[0].data(), init[0].size() * 4), 0);
}

TEST(TrainerTest, RunResumesFromLatestCheckpointInDir) {
  TempDir dir("run");
  std::vector<std::string> sets = {"train.steps=6", "train.eval_every=0", "train.eval_batches=1",
                                   "checkpoint.dir=" + dir.path(), "checkpoint.every=3"};
  {
    auto t = Trainer::Create(LoadTiny(sets));
    ASSERT_TRUE(t.ok());
    std::FILE* sink = std::tmpfile();
    ASSERT_TRUE(RunTrainingLoop(**t, sink).ok());
    std::fclose(sink);
  }
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000003.h5"));
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000006.h5"));
  Result<std::string> latest = LatestCheckpoint(dir.path());
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir / "step-00000006.h5");
  sets[0] = "train.steps=8";
  sets.push_back("checkpoint.resume=true");
  auto t = Trainer::Create(LoadTiny(sets));
  ASSERT_TRUE(t.ok());
  std::FILE* sink = std::tmpfile();
  ASSERT_TRUE(RunTrainingLoop(**t, sink).ok());
  std::fclose(sink);
  EXPECT_EQ((*t)->step(), 8);
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000008.h5"));
}

TEST(TrainerTest, MissingCheckpointIsNotFound) {
  TempDir dir("missing");
  auto t = Trainer::Create(LoadTiny({"train.steps=2"}));
  ASSERT_TRUE(t.ok());
  Status s = (*t)->LoadCheckpoint(dir / "nope.h5");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("nope.h5"), std::string::npos) << s.message();
  Result<std::string> latest = LatestCheckpoint(dir.path());
  EXPECT_EQ(latest.status().code(), StatusCode::kNotFound);
  auto r = Trainer::Create(
      LoadTiny({"train.steps=2", "checkpoint.dir=" + dir.path(), "checkpoint.resume=true"}));
  ASSERT_TRUE(r.ok());
  std::FILE* sink = std::tmpfile();
  Result<TrainingOutcome> run = RunTrainingLoop(**r, sink);
  std::fclose(sink);
  EXPECT_EQ(run.status().code(), StatusCode::kNotFound);
  EXPECT_NE(run.status().message().find("--resume"), std::string::npos);
}

TEST(TrainerTest, TruncatedOrCorruptCheckpointIsDataLoss) {
  TempDir dir("trunc");
  const std::string path = dir / "step-00000001.h5";
  auto t = Trainer::Create(LoadTiny({"train.steps=2"}));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*t)->Step().ok());
  ASSERT_TRUE((*t)->SaveCheckpoint(path).ok());
  const auto size = std::filesystem::file_size(path);
  for (uintmax_t keep : {size - 1, size / 2, uintmax_t{10}, uintmax_t{0}}) {
    const std::string cut = dir / ("cut" + std::to_string(keep) + ".h5");
    std::filesystem::copy_file(path, cut);
    std::filesystem::resize_file(cut, keep);
    Status s = (*t)->LoadCheckpoint(cut);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << keep << ": " << s.message();
    EXPECT_NE(s.message().find(cut), std::string::npos) << s.message();
  }
  // A flipped bit inside a parameter's raw data: HDF5 itself would load it; the checksum does not.
  {
    const std::vector<float> first = (*t)->ParameterValues()[0];
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const std::string needle(reinterpret_cast<const char*>(first.data()), 64);
    const size_t at = bytes.find(needle);
    ASSERT_NE(at, std::string::npos) << "parameter bytes not found in the file";
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at + 5));
    f.put(static_cast<char>(bytes[at + 5] ^ 0x10));
  }
  Status s = (*t)->LoadCheckpoint(path);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.message();
  EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.message();
  EXPECT_EQ((*t)->step(), 1);  // a failed load leaves the trainer as it was
}

TEST(TrainerTest, CheckpointOfAnotherModelIsRejected) {
  TempDir dir("mismatch");
  const std::string path = dir / "step-00000001.h5";
  {
    auto t = Trainer::Create(LoadTiny({"train.steps=2"}));
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->Step().ok());
    ASSERT_TRUE((*t)->SaveCheckpoint(path).ok());
  }
  auto other = Trainer::Create(LoadTiny({"train.steps=2", "model.num_experts=8"}));
  ASSERT_TRUE(other.ok());
  Status s = (*other)->LoadCheckpoint(path);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("model.num_experts"), std::string::npos) << s.message();
  EXPECT_EQ((*other)->step(), 0);
  // Changing only the training length is fine.
  auto longer = Trainer::Create(LoadTiny({"train.steps=50"}));
  ASSERT_TRUE(longer.ok());
  EXPECT_TRUE((*longer)->LoadCheckpoint(path).ok());
  EXPECT_EQ((*longer)->step(), 1);
}

TEST(TrainerTest, ParallelSettingsThatNeedMpiAreClearErrors) {
  // One process cannot hold an EP group of 2.
  auto ep = Trainer::Create(LoadTiny({"train.steps=2", "parallel.ep_size=2"}));
  EXPECT_EQ(ep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ep.status().message().find("parallel.ep_size"), std::string::npos)
      << ep.status().message();
  EXPECT_NE(ep.status().message().find("mpirun"), std::string::npos) << ep.status().message();
  auto zero3 = Trainer::Create(LoadTiny({"train.steps=2", "parallel.zero_stage=3"}));
  EXPECT_EQ(zero3.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero3.status().message().find("'parallel.zero_stage'"), std::string::npos)
      << zero3.status().message();
}

TEST(TrainerTest, SimDeviceTrainsLikeCpu) {
  auto cpu = Trainer::Create(LoadTiny({"train.steps=3"}));
  auto sim = Trainer::Create(LoadTiny({"train.steps=3", "train.device=sim"}));
  ASSERT_TRUE(cpu.ok());
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  for (int i = 0; i < 3; ++i) {
    auto a = (*cpu)->Step();
    auto b = (*sim)->Step();
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_NEAR(a->loss, b->loss, 1e-4f * std::max(1.0f, a->loss));
    ASSERT_EQ(b->expert_load.size(), 2u);
    int64_t slots = 0;
    for (int64_t n : b->expert_load[0]) slots += n;
    EXPECT_EQ(slots, b->tokens * 2);  // top-2
  }
}

// On a GPU (skipped without one) a one-process run steps AdamW on the device (DeviceAdam): the
// losses follow the CPU's, and a run resumed from a checkpoint, whose moments come back to the
// host for the save and go back to the device on load, continues the uninterrupted run's curve.
// The tolerance covers the GPU's different summation order (gradient norm, reductions), not a
// lost moment: a resume that dropped m and v moves the loss by far more.
std::unique_ptr<Trainer> CudaTrainerOrNull(std::vector<std::string> sets) {
  sets.push_back("train.device=cuda:0");
  auto t = Trainer::Create(LoadTiny(std::move(sets)));
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), StatusCode::kUnavailable) << t.status().message();
    return nullptr;
  }
  return std::move(*t);
}

TEST(TrainerTest, CudaDeviceOptimizerTrainsLikeCpu) {
  const std::vector<std::string> sets = {"train.steps=20", "train.eval_every=0",
                                         "optim.warmup_steps=5"};
  std::unique_ptr<Trainer> gpu = CudaTrainerOrNull(sets);
  if (gpu == nullptr) GTEST_SKIP() << "no GPU here: the device optimizer was not run";
  auto cpu = Trainer::Create(LoadTiny(sets));
  ASSERT_TRUE(cpu.ok());
  for (int i = 0; i < 20; ++i) {
    auto a = (*cpu)->Step();
    auto b = gpu->Step();
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(b.ok()) << b.status().message();
    EXPECT_NEAR(a->loss, b->loss, 1e-4f * std::max(1.0f, a->loss)) << "step " << i + 1;
    EXPECT_NEAR(a->grad_norm, b->grad_norm, 1e-4f * std::max(1.0f, a->grad_norm));
  }
  const auto cpu_params = (*cpu)->ParameterValues();
  const auto gpu_params = gpu->ParameterValues();
  ASSERT_EQ(cpu_params.size(), gpu_params.size());
  double worst = 0;
  for (size_t p = 0; p < cpu_params.size(); ++p) {
    ASSERT_EQ(cpu_params[p].size(), gpu_params[p].size());
    for (size_t i = 0; i < cpu_params[p].size(); ++i) {
      worst = std::max(worst, double(std::abs(cpu_params[p][i] - gpu_params[p][i])));
    }
  }
  EXPECT_LT(worst, 1e-3) << "largest parameter difference after 20 steps";
}

TEST(TrainerTest, CudaDeviceOptimizerResumesTheCurve) {
  TempDir dir("cuda_resume");
  const std::vector<std::string> sets = {"train.steps=12", "train.eval_every=0",
                                         "optim.warmup_steps=3"};
  std::unique_ptr<Trainer> straight = CudaTrainerOrNull(sets);
  if (straight == nullptr) GTEST_SKIP() << "no GPU here: the device optimizer was not run";
  std::vector<float> straight_losses;
  for (int i = 0; i < 12; ++i) {
    auto r = straight->Step();
    ASSERT_TRUE(r.ok()) << r.status().message();
    straight_losses.push_back(r->loss);
  }
  const std::string ckpt = dir / "step-00000006.h5";
  std::vector<float> resumed_losses;
  {
    std::unique_ptr<Trainer> first = CudaTrainerOrNull(sets);
    ASSERT_NE(first, nullptr);
    for (int i = 0; i < 6; ++i) {
      auto r = first->Step();
      ASSERT_TRUE(r.ok());
      resumed_losses.push_back(r->loss);
    }
    ASSERT_TRUE(first->SaveCheckpoint(ckpt).ok());
  }
  std::unique_ptr<Trainer> second = CudaTrainerOrNull(sets);
  ASSERT_NE(second, nullptr);
  Status loaded = second->LoadCheckpoint(ckpt);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  for (int i = 0; i < 6; ++i) {
    auto r = second->Step();
    ASSERT_TRUE(r.ok());
    resumed_losses.push_back(r->loss);
  }
  for (size_t i = 0; i < straight_losses.size(); ++i) {
    EXPECT_NEAR(resumed_losses[i], straight_losses[i], 1e-5f * std::max(1.0f, straight_losses[i]))
        << "step " << i + 1;
  }
}

TEST(TrainerTest, RoutingTraceHoldsEachRecordedTokensTopK) {
  TempDir dir("trace");
  const std::string path = dir / "trace.txt";
  auto t = Trainer::Create(
      LoadTiny({"train.steps=3", "train.eval_every=0", "train.eval_batches=1",
                "log.routing_trace=" + path, "log.routing_trace_tokens=5", "model.num_experts=8"}));
  ASSERT_TRUE(t.ok()) << t.status().message();
  std::FILE* sink = std::tmpfile();
  ASSERT_TRUE(RunTrainingLoop(**t, sink).ok());
  std::fclose(sink);
  Result<storage::AccessTrace> trace = storage::ReadTraceFile(path);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->num_layers, 2u);
  EXPECT_EQ(trace->num_experts, 8u);
  EXPECT_EQ(trace->num_steps(), 15u);  // 3 steps x 5 tokens
  // Every (trace step, layer) names exactly top_k = 2 distinct experts.
  std::map<std::pair<uint32_t, uint32_t>, std::set<uint32_t>> chosen;
  for (const storage::Access& a : trace->accesses) chosen[{a.step, a.layer}].insert(a.expert);
  EXPECT_EQ(chosen.size(), 30u);
  for (const auto& [key, experts] : chosen) EXPECT_EQ(experts.size(), 2u) << key.first;
}

// The text a run printed to `sink` (a tmpfile).
std::string Printed(std::FILE* sink) {
  std::fflush(sink);
  std::rewind(sink);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), sink)) > 0;) text.append(buffer, n);
  return text;
}

// Runs the loop over a fresh trainer of the tiny config with `sets`; returns what it printed.
std::string RunTiny(const std::vector<std::string>& sets, Result<TrainingOutcome>* outcome,
                    const TrainingLoopOptions& options = {}, int64_t* step = nullptr) {
  auto t = Trainer::Create(LoadTiny(sets));
  SY_CHECK(t.ok()) << t.status().message();
  std::FILE* sink = std::tmpfile();
  *outcome = RunTrainingLoop(**t, sink, options);
  std::string text = Printed(sink);
  std::fclose(sink);
  if (step != nullptr) *step = (*t)->step();
  return text;
}

// Issue 20, defect 5: a damaged newest checkpoint is skipped with a warning naming it; the run
// resumes from the newest one that verifies. checkpoint.resume_from picks one file.
TEST(TrainerTest, ResumeSkipsADamagedNewestCheckpoint) {
  TempDir dir("fallback");
  std::vector<std::string> sets = {"train.steps=6", "train.eval_every=0", "train.eval_batches=1",
                                   "checkpoint.dir=" + dir.path(), "checkpoint.every=3"};
  Result<TrainingOutcome> outcome = InternalError("not run");
  RunTiny(sets, &outcome);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  const std::string newest = dir / "step-00000006.h5", older = dir / "step-00000003.h5";
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);

  sets[0] = "train.steps=8";
  std::vector<std::string> resume = sets;
  resume.push_back("checkpoint.resume=true");
  int64_t step = 0;
  std::string text = RunTiny(resume, &outcome, {}, &step);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message() << "\n" << text;
  EXPECT_EQ(step, 8);
  EXPECT_NE(text.find("warning: skipping checkpoint " + newest + ": DataLoss"), std::string::npos)
      << text;
  EXPECT_NE(text.find("resumed from " + older + " at step 3"), std::string::npos) << text;

  // A named file is the one resumed from.
  std::vector<std::string> from = sets;
  from.push_back("checkpoint.resume_from=" + older);
  text = RunTiny(from, &outcome, {}, &step);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  EXPECT_NE(text.find("resumed from " + older + " at step 3"), std::string::npos) << text;
  EXPECT_EQ(text.find("skipping"), std::string::npos) << text;

  // When no checkpoint verifies, the error says so and names the last one tried.
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().extension() == ".h5") std::filesystem::resize_file(entry.path(), 100);
  }
  text = RunTiny(resume, &outcome);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), StatusCode::kDataLoss) << outcome.status().message();
  EXPECT_NE(outcome.status().message().find("no checkpoint in " + dir.path() + " verifies"),
            std::string::npos)
      << outcome.status().message();
  EXPECT_NE(text.find("warning: skipping checkpoint"), std::string::npos) << text;
}

// Issue 20, defect 12: resuming with train.steps at or below the checkpoint's step says that there
// is nothing to train, and rewrites no checkpoint.
TEST(TrainerTest, ResumePastTrainStepsSaysSo) {
  TempDir dir("past");
  std::vector<std::string> sets = {"train.steps=4", "train.eval_every=0", "train.eval_batches=1",
                                   "checkpoint.dir=" + dir.path()};
  Result<TrainingOutcome> outcome = InternalError("not run");
  RunTiny(sets, &outcome);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  const std::string saved = dir / "step-00000004.h5";
  const auto written = std::filesystem::last_write_time(saved);
  sets[0] = "train.steps=2";
  sets.push_back("checkpoint.resume=true");
  int64_t step = 0;
  const std::string text = RunTiny(sets, &outcome, {}, &step);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  EXPECT_EQ(step, 4);
  EXPECT_NE(text.find("nothing to train: the checkpoint is at step 4 and train.steps is 2"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("checkpoint " + saved), std::string::npos) << text;
  EXPECT_EQ(std::filesystem::last_write_time(saved), written);
}

// Issue 20, defect 10: a second run on a checkpoint.dir that a run holds is refused, naming the
// holder's pid and host; once the holder is gone the directory is free again.
TEST(TrainerTest, SecondRunOnACheckpointDirIsRefused) {
  TempDir dir("lock");
  std::string warning;
  auto held = DirectoryLock::Acquire(dir.path(), DirectoryLockOptions{}, &warning);
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(warning, "");
  const std::vector<std::string> sets = {"train.steps=1", "train.eval_batches=1",
                                         "checkpoint.dir=" + dir.path()};
  Result<TrainingOutcome> outcome = InternalError("not run");
  RunTiny(sets, &outcome);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), StatusCode::kFailedPrecondition);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  EXPECT_NE(
      outcome.status().message().find("pid " + std::to_string(::getpid()) + " on host " + host),
      std::string::npos)
      << outcome.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir / "step-00000001.h5"));
  held->reset();
  RunTiny(sets, &outcome);
  EXPECT_TRUE(outcome.ok()) << outcome.status().message();
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000001.h5"));
}

// Issue 46, finding 3: a symbolic link or a FIFO planted where the lock file goes is refused,
// naming it; the link's target keeps its bytes. The holder's line names its start time.
TEST(TrainerTest, APlantedLockFileIsRefused) {
  TempDir dir("lock-planted");
  const std::string victim = dir / "victim";
  std::ofstream(victim) << "precious";
  const std::string lock = DirectoryLock::LockPath(dir.path(), "switchyard.lock");
  ASSERT_EQ(::symlink(victim.c_str(), lock.c_str()), 0);
  std::string warning;
  auto held = DirectoryLock::Acquire(dir.path(), DirectoryLockOptions{}, &warning);
  ASSERT_FALSE(held.ok());
  EXPECT_EQ(held.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(held.status().message().find(lock + " is a symbolic link (to " + victim + ")"),
            std::string::npos)
      << held.status().message();
  std::ifstream in(victim);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "precious");

  ASSERT_EQ(::unlink(lock.c_str()), 0);
  ASSERT_EQ(::mkfifo(lock.c_str(), 0600), 0);
  held = DirectoryLock::Acquire(dir.path(), DirectoryLockOptions{}, &warning);
  ASSERT_FALSE(held.ok());
  EXPECT_NE(held.status().message().find(lock + " is a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << held.status().message();

  ASSERT_EQ(::unlink(lock.c_str()), 0);
  held = DirectoryLock::Acquire(dir.path(), DirectoryLockOptions{}, &warning);
  ASSERT_TRUE(held.ok()) << held.status().message();
  std::ifstream holder(lock);
  std::string line;
  std::getline(holder, line);
  EXPECT_EQ(line.rfind("pid " + std::to_string(::getpid()) + " on host ", 0), 0u) << line;
  EXPECT_NE(line.find(" since 20"), std::string::npos) << line;
}

// Issue 20, defect 4: a run removes the temporary files that a killed save left in checkpoint.dir
// (of a process that is gone) and says so.
TEST(TrainerTest, RunRemovesTemporariesOfKilledSaves) {
  TempDir dir("stale");
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string stale = dir / ("step-00000575.h5.tmp." + std::to_string(dead));
  std::ofstream(stale) << "half a checkpoint";
  Result<TrainingOutcome> outcome = InternalError("not run");
  const std::string text =
      RunTiny({"train.steps=1", "train.eval_batches=1", "checkpoint.dir=" + dir.path()}, &outcome);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_NE(text.find("removed " + stale), std::string::npos) << text;
}

// Issue 20, defect 11: a stop request (what SIGTERM sets) ends the run after the step under way,
// with a checkpoint of it and a line that says so; no final evaluation.
TEST(TrainerTest, StopRequestWritesACheckpointAndEnds) {
  TempDir dir("stop");
  std::atomic<int> stop{SIGTERM};
  TrainingLoopOptions options;
  options.stop = &stop;
  Result<TrainingOutcome> outcome = InternalError("not run");
  int64_t step = 0;
  const std::string text =
      RunTiny({"train.steps=50", "train.eval_batches=1", "checkpoint.dir=" + dir.path()}, &outcome,
              options, &step);
  ASSERT_TRUE(outcome.ok()) << outcome.status().message();
  EXPECT_EQ(outcome->stopped_by_signal, SIGTERM);
  EXPECT_FALSE(outcome->final_eval.has_value());
  EXPECT_EQ(step, 1);
  EXPECT_TRUE(std::filesystem::exists(dir / "step-00000001.h5"));
  EXPECT_NE(text.find("stopped by SIGTERM at step 1; continue with --resume"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("final step"), std::string::npos) << text;
}
}  // namespace
}  // namespace sy::launcher
