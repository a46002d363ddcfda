// Training on the expert store (launcher/training/expert_state_store.h): with expert_store.dir
// set and a CPU cache of at most 25% of the expert states, so that experts are evicted and
// written back every step, the losses and the final parameters and optimizer states are bit for
// bit those of in-memory training (the oracle: the same config without the block); an in-memory
// checkpoint resumes on the store; each expert's state is read at most once per step; sparse_adam
// really skips the zero-gradient steps; a cache that holds no expert is a clear error.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/training/train_checkpoint.h"
#include "launcher/training/trainer.h"
#include "tests/temp_dir.h"

namespace sy::launcher {
namespace {

using TempDir = sy::testing::TempDir;

// The tiny config with 16 experts of which each token takes one, on 32 tokens a step: in every
// step some experts get no tokens (their zero-gradient updates are replayed later).
std::vector<std::string> SparseRouting() {
  return {"model.num_experts=16", "model.top_k=1",        "data.batch_size=2", "train.threads=2",
          "train.eval_every=0",   "optim.warmup_steps=3", "log.progress=none"};
}

TrainConfig Load(std::vector<std::string> sets) {
  Result<TrainConfig> config = LoadTrainConfigFile(SY_TINY_CONFIG, sets);
  SY_CHECK(config.ok()) << config.status().message();
  return *config;
}

// The store's cache at `fraction` of the expert states of the tiny config's experts (hidden 64,
// expert width 128: 3 * 64 * 128 parameters, 12 B each plus 16 B of step counts, in 4 KiB pages).
std::vector<std::string> WithStore(std::vector<std::string> sets, const std::string& dir,
                                   int experts, double fraction) {
  const double extent = std::ceil((3.0 * 64 * 128 * 12 + 16) / 4096) * 4096;
  const double mib = std::floor(experts * fraction) * extent / (1 << 20) + 1e-6;
  sets.push_back("expert_store.dir=\"" + dir + "\"");
  sets.push_back("expert_store.filesystem=posix");
  sets.push_back("expert_store.cache_mib=" + std::to_string(mib));
  return sets;
}

struct TrainRun {
  std::vector<float> losses;
  TrainCheckpoint checkpoint;
  std::vector<StepReport> reports;
};

TrainCheckpoint ReadBack(const std::string& path, Trainer& t) {
  // Every parameter, experts included (with the working set the model registers none).
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (auto& [name, shape] : t.CheckpointParameters()) {
    names.push_back(name);
    shapes.push_back(shape);
  }
  Result<TrainCheckpoint> c = ReadTrainCheckpoint(path, names, shapes, true, true);
  SY_CHECK(c.ok()) << c.status().message();
  return *c;
}

// Trains `steps` steps (after loading `resume` when given) and saves a checkpoint to `save`.
TrainRun Train(const TrainConfig& config, int steps, const std::string& save,
               const std::string& resume = "") {
  TrainRun run;
  auto t = Trainer::Create(config);
  SY_CHECK(t.ok()) << t.status().message();
  if (!resume.empty()) {
    const Status loaded = (*t)->LoadCheckpoint(resume);
    SY_CHECK(loaded.ok()) << loaded.message();
  }
  for (int i = 0; i < steps; ++i) {
    Result<StepReport> r = (*t)->Step();
    SY_CHECK(r.ok()) << r.status().message();
    run.losses.push_back(r->loss);
    run.reports.push_back(*r);
  }
  const Status saved = (*t)->SaveCheckpoint(save);
  SY_CHECK(saved.ok()) << saved.message();
  run.checkpoint = ReadBack(save, **t);
  return run;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectBitIdentical(const TrainRun& store, const TrainRun& memory) {
  ASSERT_EQ(store.losses.size(), memory.losses.size());
  for (size_t i = 0; i < memory.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&store.losses[i], &memory.losses[i], sizeof(float)), 0)
        << "step " << i + 1 << ": " << store.losses[i] << " vs " << memory.losses[i];
  }
  const TrainCheckpoint& a = store.checkpoint;
  const TrainCheckpoint& b = memory.checkpoint;
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.optimizer_steps, b.optimizer_steps);
  for (size_t i = 0; i < b.params.size(); ++i) {
    EXPECT_TRUE(SameBits(a.params[i].data, b.params[i].data)) << b.params[i].name;
    EXPECT_TRUE(SameBits(a.optimizer_m[i].data, b.optimizer_m[i].data)) << "m " << b.params[i].name;
    EXPECT_TRUE(SameBits(a.optimizer_v[i].data, b.optimizer_v[i].data)) << "v " << b.params[i].name;
  }
}

TEST(ExpertStoreTrainingTest, BitIdenticalToInMemoryWithAQuarterCache) {
  TempDir dir("equal");
  const int steps = 12;
  const TrainRun memory = Train(Load(SparseRouting()), steps, dir / "memory.h5");
  const TrainConfig config = Load(WithStore(SparseRouting(), dir / "store", 32, 0.25));
  const TrainRun store = Train(config, steps, dir / "store.h5");
  ExpectBitIdentical(store, memory);
  // The working set: each step holds the f32 weight and gradient of the experts it activated,
  // and fewer than all of them (some experts go without tokens).
  const uint64_t all_experts = 32ull * 3 * 64 * 128 * 8;
  int partial = 0;
  for (const StepReport& r : store.reports) {
    EXPECT_GT(r.expert_working_set_bytes, 0u) << "step " << r.step;
    EXPECT_LE(r.expert_working_set_bytes, all_experts) << "step " << r.step;
    partial += r.expert_working_set_bytes < all_experts;
  }
  EXPECT_GT(partial, 0);
  for (const StepReport& r : store.reports) {
    ASSERT_TRUE(r.has_expert_store);
    // More experts are activated than the cache holds: misses, reads and write-backs every step.
    EXPECT_GT(r.expert_cache_misses, 0u) << "step " << r.step;
    EXPECT_GT(r.store_bytes_read, 0u) << "step " << r.step;
    EXPECT_GT(r.store_bytes_written, 0u) << "step " << r.step;
  }
  // Some expert went without tokens in a step, so its zero-gradient updates were replayed: the
  // comparison covers the lazy path, and the moments were decayed (not only the trained ones).
  int idle = 0;
  for (const StepReport& r : memory.reports) {
    for (const auto& layer : r.expert_load) {
      for (int64_t load : layer) idle += load == 0;
    }
  }
  EXPECT_GT(idle, 0);
  // The in-memory run trained most experts' moments (the comparison is not of zeros).
  int moved = 0, experts = 0;
  for (size_t i = 0; i < memory.checkpoint.params.size(); ++i) {
    if (memory.checkpoint.params[i].name.rfind("experts/", 0) != 0) continue;
    ++experts;
    for (float x : memory.checkpoint.optimizer_m[i].data) {
      if (x != 0.0f) {
        ++moved;
        break;
      }
    }
  }
  EXPECT_GT(moved, experts / 2);
}

// With every expert activated every step (top-k = all), none is ever behind, so the store reads
// each expert's state at most once per step: an uncached one's master at its layer's forward and
// the rest (m, v, counts) at its update. Reading it whole at the forward and again at the update,
// as before, read 56 extents a step here (checked by disabling the split reads).
TEST(ExpertStoreTrainingTest, EachExpertIsReadAtMostOncePerStep) {
  TempDir dir("once");
  std::vector<std::string> dense = SparseRouting();
  dense.push_back("model.top_k=16");
  const int steps = 4;
  const TrainRun memory = Train(Load(dense), steps, dir / "memory.h5");
  for (const char* prefetch : {"true", "false"}) {
    SCOPED_TRACE(prefetch);
    std::vector<std::string> sets = WithStore(dense, dir / "store", 32, 0.25);
    sets.push_back(std::string("expert_store.prefetch=") + prefetch);
    const TrainRun store = Train(Load(sets), steps, dir / "store.h5");
    ExpectBitIdentical(store, memory);
    const uint64_t payload = 3 * 64 * 128 * 12 + 16;  // master, m, v and the counts
    // With prefetch, the step's end starts LOW reads of the next step's first experts (at most
    // half the prefetch window, which is below the cache's slots, at most 8 here: 3); one that
    // completes before the step's report is counted in this step, though the next step uses it.
    const uint64_t look_ahead = std::string(prefetch) == "true" ? 3 : 0;
    for (const StepReport& r : store.reports) {
      EXPECT_GT(r.store_bytes_read, 0u) << "step " << r.step;
      EXPECT_LE(r.store_bytes_read, (32 + look_ahead) * payload) << "step " << r.step;
    }
  }
}

TEST(ExpertStoreTrainingTest, BitIdenticalWithoutPrefetchAndWithOneSlot) {
  TempDir dir("one_slot");
  const int steps = 6;
  const TrainRun memory = Train(Load(SparseRouting()), steps, dir / "memory.h5");
  std::vector<std::string> sets = WithStore(SparseRouting(), dir / "store", 1, 1.0);
  sets.push_back("expert_store.prefetch=false");
  const TrainRun store = Train(Load(sets), steps, dir / "store.h5");
  ExpectBitIdentical(store, memory);
}

// On a device (not host memory) the working set uploads the activated experts' weights and
// downloads their gradients (Note [working set on a device] in expert_working_set.cc): against
// in-memory training on the same device, every loss, parameter, moment and step count is
// bit-identical, also across a save and a resume of the store's checkpoint there.
void ExpectWorkingSetOnDeviceBitIdentical(const std::vector<std::string>& on_device,
                                          const TempDir& dir) {
  const TrainRun memory = Train(Load(on_device), 8, dir / "memory.h5");
  const TrainConfig config = Load(WithStore(on_device, dir / "store", 32, 0.25));
  {
    auto t = Trainer::Create(config);
    ASSERT_TRUE(t.ok()) << t.status().message();
    ASSERT_NE((*t)->expert_working_set(), nullptr);
    EXPECT_EQ((*t)->model().parameters().num_expert_elements(), 0);
  }
  const TrainRun first = Train(config, 5, dir / "half.h5");
  const TrainRun second = Train(config, 3, dir / "store.h5", dir / "half.h5");
  TrainRun joined = second;
  joined.losses = first.losses;
  joined.losses.insert(joined.losses.end(), second.losses.begin(), second.losses.end());
  ExpectBitIdentical(joined, memory);
  // The device's weights and gradients of the activated experts, and their host copies.
  const uint64_t all_experts = 32ull * 3 * 64 * 128 * 8 * 2;
  int partial = 0;
  for (const TrainRun* run : {&first, &second}) {
    for (const StepReport& r : run->reports) {
      EXPECT_GT(r.expert_working_set_bytes, 0u) << "step " << r.step;
      EXPECT_LE(r.expert_working_set_bytes, all_experts) << "step " << r.step;
      partial += r.expert_working_set_bytes < all_experts;
      EXPECT_GT(r.expert_cache_misses, 0u) << "step " << r.step;
    }
  }
  EXPECT_GT(partial, 0);
}

TEST(ExpertStoreTrainingTest, OnTheSimDeviceBitIdenticalToInMemoryOnSim) {
  std::vector<std::string> sim = SparseRouting();
  sim.push_back("train.device=sim");
  ExpectWorkingSetOnDeviceBitIdentical(sim, TempDir("sim"));
}

// On a GPU: in memory, the whole model's AdamW runs on the GPU (DeviceAdam, bit for bit the host
// update: AdamwCudaTest), while with the store the dense update and the experts' run on the host.
// The gradient norm is summed in another order on the GPU (GradNormCudaTest: within 1e-12), so
// clipping would scale the two runs' gradients by factors a bit apart: this run does not clip.
TEST(ExpertStoreTrainingTest, OnACudaDeviceBitIdenticalToInMemoryOnCuda) {
  std::vector<std::string> cuda = SparseRouting();
  cuda.push_back("train.device=cuda:0");
  cuda.push_back("train.grad_clip=0");
  {
    auto t = Trainer::Create(Load(cuda));
    if (!t.ok()) {
      ASSERT_EQ(t.status().code(), StatusCode::kUnavailable) << t.status().message();
      GTEST_SKIP() << "no GPU here: the working set on cuda was not run";
    }
  }
  ExpectWorkingSetOnDeviceBitIdentical(cuda, TempDir("cuda"));
}

TEST(ExpertStoreTrainingTest, InMemoryCheckpointResumesOnTheStoreBitIdentically) {
  TempDir dir("resume");
  const TrainRun straight = Train(Load(SparseRouting()), 10, dir / "straight.h5");
  const TrainRun first = Train(Load(SparseRouting()), 5, dir / "half.h5");
  const TrainConfig config = Load(WithStore(SparseRouting(), dir / "store", 32, 0.25));
  const TrainRun second = Train(config, 5, dir / "resumed.h5", dir / "half.h5");
  TrainRun joined = second;
  joined.losses = first.losses;
  joined.losses.insert(joined.losses.end(), second.losses.begin(), second.losses.end());
  ExpectBitIdentical(joined, straight);
  // And the store's own checkpoint resumes in memory.
  const TrainRun third = Train(Load(SparseRouting()), 0, dir / "again.h5", dir / "resumed.h5");
  ExpectBitIdentical({{}, third.checkpoint, {}}, {{}, straight.checkpoint, {}});
}

TEST(ExpertStoreTrainingTest, SparseAdamSkipsTheZeroGradientSteps) {
  TempDir dir("sparse");
  const int steps = 6;
  const TrainRun memory = Train(Load(SparseRouting()), steps, dir / "memory.h5");
  std::vector<std::string> sets = WithStore(SparseRouting(), dir / "store", 32, 0.25);
  sets.push_back("expert_store.sparse_adam=true");
  const TrainRun sparse = Train(Load(sets), steps, dir / "sparse.h5");
  // The first step starts from the same state; then experts idle in some step differ.
  EXPECT_EQ(std::memcmp(&sparse.losses[0], &memory.losses[0], sizeof(float)), 0);
  int behind = 0, dense_equal = 0;
  for (size_t i = 0; i < memory.checkpoint.params.size(); ++i) {
    const std::string& name = memory.checkpoint.params[i].name;
    if (name.rfind("experts/", 0) == 0) {
      EXPECT_LE(sparse.checkpoint.optimizer_steps[i], memory.checkpoint.optimizer_steps[i]);
      behind += sparse.checkpoint.optimizer_steps[i] < memory.checkpoint.optimizer_steps[i];
    } else {
      dense_equal += sparse.checkpoint.optimizer_steps[i] == memory.checkpoint.optimizer_steps[i];
    }
  }
  EXPECT_GT(behind, 0);
  EXPECT_GT(dense_equal, 0);
  for (float loss : sparse.losses) EXPECT_TRUE(std::isfinite(loss));
}

TEST(ExpertStoreTrainingTest, TheModelHoldsNoExpertWeights) {
  TempDir dir("bound");
  auto t = Trainer::Create(Load(WithStore(SparseRouting(), dir / "store", 32, 0.25)));
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_NE((*t)->expert_working_set(), nullptr);
  EXPECT_EQ((*t)->model().parameters().num_expert_elements(), 0);
  EXPECT_EQ((*t)->num_expert_parameters(), 32ll * 3 * 64 * 128);  // the checkpoint still has them
  int experts = 0;
  for (const auto& [name, shape] : (*t)->CheckpointParameters()) {
    experts += name.rfind("experts/", 0) == 0;
  }
  EXPECT_EQ(experts, 32 * 3);
}

TEST(ExpertStoreTrainingTest, ACacheThatHoldsNoExpertIsAClearError) {
  TempDir dir("small");
  std::vector<std::string> sets = SparseRouting();
  sets.push_back("expert_store.dir=\"" + (dir / "store") + "\"");
  sets.push_back("expert_store.cache_mib=0.01");
  auto t = Trainer::Create(Load(sets));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find("expert_store.cache_mib"), std::string::npos)
      << t.status().message();
}

// Issue 46, finding 6: a second run on an expert_store.dir in use fails at once, naming the
// holder's pid, host and start time; with train.wait_for_lock it says it waits, and goes on once
// the holder is gone.
TEST(ExpertStoreTrainingTest, ASecondRunOnTheStoreFailsAtOnceNamingTheHolder) {
  TempDir dir("store-lock");
  const std::string store = dir / "store";
  const std::vector<std::string> sets = WithStore(SparseRouting(), store, 4, 0.5);
  auto first = Trainer::Create(Load(sets));
  ASSERT_TRUE(first.ok()) << first.status().message();

  const auto start = std::chrono::steady_clock::now();
  auto second = Trainer::Create(Load(sets));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string want = "expert_store.dir " + store + " is locked by pid " +
                           std::to_string(::getpid()) + " on host " + host + " since ";
  EXPECT_NE(second.status().message().find(want), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find("--wait-for-lock"), std::string::npos);
  EXPECT_LT(waited, 2.0) << "it must not wait without --wait-for-lock";

  std::vector<std::string> waiting = sets;
  waiting.push_back("train.wait_for_lock=true");
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    first->reset();
  });
  auto third = Trainer::Create(Load(waiting));
  release.join();
  EXPECT_TRUE(third.ok()) << third.status().message();
}

// What a run killed while creating its store left (the store's temporary, as large as the store)
// is removed by the next run on that directory; a live process's is kept.
TEST(ExpertStoreTrainingTest, ARunRemovesTheStoreTemporaryAKilledRunLeft) {
  TempDir dir("store-stale");
  const std::string store = dir / "store";
  std::filesystem::create_directories(store);
  const pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string left = store + "/rank-0.store.tmp." + std::to_string(dead) + ".00c0ffee";
  const std::string live = store + "/rank-0.store.tmp." + std::to_string(::getpid()) + ".0b0e";
  std::ofstream(left) << "half a store";
  std::ofstream(live) << "a store being created";
  auto trainer = Trainer::Create(Load(WithStore(SparseRouting(), store, 4, 0.5)));
  ASSERT_TRUE(trainer.ok()) << trainer.status().message();
  EXPECT_FALSE(std::filesystem::exists(left));
  EXPECT_TRUE(std::filesystem::exists(live));
}

}  // namespace
}  // namespace sy::launcher
