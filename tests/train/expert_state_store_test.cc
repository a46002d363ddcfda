// ExpertStateStore (launcher/training/expert_state_store.h) on an in-memory file system: its
// lazy AdamW equals stepping every expert every step in memory, bit for bit (the oracle runs the
// same Optimizer over plain vectors); the sparse-axis prefetch reads the experts the routing
// names behind compute on a slow device; I/O faults come back as a Status naming the expert and
// the store file, and the store keeps serving its last durable state.
#include "launcher/training/expert_state_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/core/check.h"
#include "storage/fs/fault_injection_file_system.h"
#include "storage/fs/mem_file_system.h"

namespace sy::launcher {
namespace {

constexpr int kLayers = 2;
constexpr int kExperts = 4;
constexpr size_t kPartSizes[] = {300, 500};  // two tensors per expert

// One expert's tensors: values and gradients, as the model holds them.
struct Tensors {
  std::vector<std::vector<float>> value, grad;
};

// kLayers MoE layers (decoder layers 1, 3, ...) of `experts` experts each, of kPartSizes x
// `scale` parameters, random values; the tensors they view go to `tensors` (layer-major).
std::vector<ExpertEntry> MakeEntries(int experts, size_t scale, std::vector<Tensors>* tensors) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<ExpertEntry> entries;
  tensors->assign(static_cast<size_t>(kLayers * experts), {});
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < experts; ++e) {
      Tensors& t = (*tensors)[static_cast<size_t>(l * experts + e)];
      ExpertEntry entry;
      entry.name = "experts/layer" + std::to_string(2 * l + 1) + "/expert" + std::to_string(e);
      entry.moe_layer = l;
      entry.decoder_layer = 2 * l + 1;
      entry.expert = e;
      for (size_t n : kPartSizes) {
        t.value.emplace_back(n * scale);
        t.grad.emplace_back(n * scale, 0.0f);
        for (float& x : t.value.back()) x = normal(rng);
      }
      for (size_t k = 0; k < t.value.size(); ++k) {
        entry.parts.push_back({t.value[k].data(), t.grad[k].data(), t.value[k].size()});
      }
      entries.push_back(std::move(entry));
    }
  }
  return entries;
}

std::unique_ptr<Optimizer> MakeAdamW(ThreadPool* pool) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.weight_decay = 0.1;
  Result<std::unique_ptr<Optimizer>> made = CreateOptimizer(o, pool);
  SY_CHECK(made.ok()) << made.status().message();
  return std::move(*made);
}

// One expert's extent in the store: master, m, v and the meta, in 4 KiB blocks.
constexpr size_t kExtent = ((800 * 12 + 16 + 4095) / 4096) * 4096;

struct Fixture {
  storage::MemFileSystem mem;
  storage::FaultInjectionFileSystem fs{&mem};
  ThreadPool pool{2};
  std::unique_ptr<Optimizer> optimizer;
  std::vector<Tensors> tensors;  // per (layer, expert), layer-major
  std::unique_ptr<ExpertStateStore> store;
  bool working_set = false;

  // `working_set`: the store's working-set mode (its parts bound every step to `tensors`, BindAll)
  // with `staging_experts` extents of staging (added to the cache's budget, which they come out
  // of, so that the cache keeps `cache_experts` slots).
  explicit Fixture(size_t cache_experts, bool sparse = false, bool prefetch = true,
                   bool defer_initial = false, bool working_set = false, size_t staging_experts = 0)
      : working_set(working_set) {
    optimizer = MakeAdamW(&pool);
    std::vector<ExpertEntry> entries = MakeEntries(kExperts, 1, &tensors);
    ExpertStateStoreOptions options;
    if (working_set) {
      options.resident = false;
      options.staging_bytes = staging_experts * kExtent;
      // The initial masters: the tensors' values, which the entries still view at creation.
      options.initial_master = [](const ExpertEntry& e, std::span<float> master) {
        size_t at = 0;
        for (const ExpertPart& p : e.parts) {
          std::memcpy(master.data() + at, p.value, p.n * sizeof(float));
          at += p.n;
        }
      };
    }
    options.path = "/store/rank-0.store";
    options.fs = &fs;
    options.cache_bytes = (cache_experts + staging_experts) * kExtent;  // staging out of it
    options.sparse_adam = sparse;
    options.prefetch = prefetch;
    options.defer_initial = defer_initial;
    Result<std::unique_ptr<ExpertStateStore>> made =
        ExpertStateStore::Create(options, optimizer.get(), std::move(entries));
    SY_CHECK(made.ok()) << made.status().message();
    store = std::move(*made);
  }
};

// One expert's payload in the store (what StoreStats counts per extent written or read).
constexpr uint64_t kPayload = 800 * 3 * sizeof(float) + 2 * sizeof(int64_t);

// Working set: binds every entry's parts to the fixture's tensors for this step (the trainer binds
// the activated experts' slots of its working set; the store does not tell the two apart).
void BindAll(Fixture& f) {
  for (size_t entry = 0; entry < f.store->entries().size(); ++entry) {
    const ExpertEntry& e = f.store->entries()[entry];
    Tensors& t = f.tensors[static_cast<size_t>(e.moe_layer * kExperts + e.expert)];
    std::vector<float*> values;
    std::vector<const float*> grads;
    for (size_t k = 0; k < t.value.size(); ++k) {
      values.push_back(t.value[k].data());
      grads.push_back(t.grad[k].data());
    }
    f.store->Bind(entry, values, grads);
  }
}

// Which experts of which layer get rows in step s (a fixed pattern with idle experts).
std::vector<int64_t> Rows(int step, int layer) {
  std::vector<int64_t> rows(kExperts, 0);
  for (int e = 0; e < kExperts; ++e) rows[e] = ((step * 3 + layer + e * 5) % 7 < 3) ? e + 1 : 0;
  return rows;
}

// Trains `num_steps` steps through the store and, beside it, the oracle (the same optimizer over
// in-memory copies, every expert every step; with `sparse`, only the experts with rows), and
// checks that they agree bit for bit: the prepared experts' values before they compute, and every
// state at the end. `compute` stands for the model's compute: it runs after each layer's Prepare
// and once more between the forward and the update.
void TrainAgainstOracle(Fixture& f, int num_steps, const std::function<void()>& compute = {},
                        bool sparse = false) {
  // The oracle: the same optimizer over in-memory copies.
  std::vector<Tensors> ref = f.tensors;
  std::vector<std::vector<std::vector<float>>> m(ref.size()), v(ref.size());
  std::vector<std::vector<int64_t>> steps(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    for (size_t n : kPartSizes) {
      m[i].emplace_back(n, 0.0f);
      v[i].emplace_back(n, 0.0f);
      steps[i].push_back(0);
    }
  }
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int s = 0; s < num_steps; ++s) {
    const double lr = 1e-2 * (1.0 + s);
    ASSERT_TRUE(f.store->BeginStep().ok());
    if (f.working_set) BindAll(f);
    for (int l = 0; l < kLayers; ++l) {
      const std::vector<int64_t> rows = Rows(s, l);
      ASSERT_TRUE(f.store->Prepare(2 * l + 1, 0, rows).ok());
      if (compute) compute();
      for (int e = 0; e < kExperts; ++e) {
        const size_t i = static_cast<size_t>(l * kExperts + e);
        // The model computes with up-to-date weights: the prepared ones equal the oracle's.
        if (rows[e] > 0) {
          for (size_t k = 0; k < ref[i].value.size(); ++k) {
            ASSERT_EQ(std::memcmp(f.tensors[i].value[k].data(), ref[i].value[k].data(),
                                  ref[i].value[k].size() * sizeof(float)),
                      0)
                << "step " << s << " layer " << l << " expert " << e;
          }
        }
        for (size_t k = 0; k < ref[i].grad.size(); ++k) {
          for (size_t j = 0; j < ref[i].grad[k].size(); ++j) {
            ref[i].grad[k][j] = rows[e] > 0 ? normal(rng) : 0.0f;
          }
          f.tensors[i].grad[k] = ref[i].grad[k];
        }
      }
    }
    std::vector<ParamGroup> groups;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (sparse && Rows(s, static_cast<int>(i) / kExperts)[i % kExperts] == 0) continue;
      for (size_t k = 0; k < ref[i].value.size(); ++k) {
        groups.push_back({ref[i].value[k].data(),
                          ref[i].grad[k].data(),
                          m[i][k].data(),
                          v[i][k].data(),
                          ref[i].value[k].size(),
                          &steps[i][k],
                          {}});
      }
    }
    f.optimizer->Step(groups, lr);
    if (compute) compute();  // the backward pass
    ASSERT_TRUE(f.store->Update(lr).ok());
    ASSERT_TRUE(f.store->EndStep().ok());
  }
  ASSERT_TRUE(f.store->Consolidate().ok());
  for (size_t entry = 0; entry < f.store->entries().size(); ++entry) {
    const ExpertEntry& e = f.store->entries()[entry];
    const size_t i = static_cast<size_t>(e.moe_layer * kExperts + e.expert);
    std::vector<std::vector<float>> em, ev;
    int64_t opt_step = 0;
    ASSERT_TRUE(f.store->Export(entry, nullptr, &em, &ev, &opt_step).ok());
    if (!sparse) {
      EXPECT_EQ(opt_step, num_steps);
    }
    for (size_t k = 0; k < ref[i].value.size(); ++k) {
      EXPECT_EQ(f.tensors[i].value[k], ref[i].value[k]) << e.name;
      EXPECT_EQ(em[k], m[i][k]) << e.name;
      EXPECT_EQ(ev[k], v[i][k]) << e.name;
    }
  }
}

TEST(ExpertStateStoreTest, LazyReplayEqualsSteppingEveryExpertEveryStep) {
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch on" : "prefetch off");
    Fixture f(/*cache_experts=*/2, /*sparse=*/false, prefetch);
    EXPECT_EQ(f.store->cache_slots(), 2u);
    TrainAgainstOracle(f, /*num_steps=*/9);
    EXPECT_GT(f.store->stats().replayed_updates, 0u);
    EXPECT_GT(f.store->stats().misses, 0u);
    EXPECT_EQ(f.store->stats().prefetched > 0, prefetch);
  }
}

// A resume (defer_initial) writes each expert's state once: Create writes nothing and each Import
// goes straight to the store, without reading it. Without defer_initial the same restore writes
// every state twice (the initial state, then the import's write-back) and reads it once. The
// restored states are those exported, bit for bit, and training goes on from them.
TEST(ExpertStateStoreTest, ResumeWritesEachExpertOnceAndReadsNothing) {
  struct Saved {
    std::vector<std::vector<float>> values, m, v;
    int64_t opt_step = 0;
  };
  std::vector<Saved> saved;
  int64_t updates = 0;
  Fixture f(/*cache_experts=*/2);
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(f.store->BeginStep().ok());
    for (int l = 0; l < kLayers; ++l) ASSERT_TRUE(f.store->Prepare(2 * l + 1, 0, Rows(s, l)).ok());
    for (Tensors& t : f.tensors) {
      for (auto& g : t.grad) std::fill(g.begin(), g.end(), 0.5f);
    }
    ASSERT_TRUE(f.store->Update(1e-2).ok());
    ASSERT_TRUE(f.store->EndStep().ok());
    ++updates;
  }
  ASSERT_TRUE(f.store->Consolidate().ok());
  saved.resize(f.store->entries().size());
  for (size_t e = 0; e < saved.size(); ++e) {
    ASSERT_TRUE(
        f.store->Export(e, &saved[e].values, &saved[e].m, &saved[e].v, &saved[e].opt_step).ok());
  }
  for (bool defer : {true, false}) {
    SCOPED_TRACE(defer ? "defer_initial" : "initial states written at Create");
    // The resumed run opens the store file the run before left, with fresh model tensors.
    f.store.reset();
    ExpertStateStoreOptions options;
    options.path = "/store/rank-0.store";
    options.fs = &f.fs;
    options.cache_bytes = 2 * kExtent;
    options.defer_initial = defer;
    std::vector<ExpertEntry> entries = MakeEntries(kExperts, 1, &f.tensors);
    Result<std::unique_ptr<ExpertStateStore>> made =
        ExpertStateStore::Create(options, f.optimizer.get(), std::move(entries));
    ASSERT_TRUE(made.ok()) << made.status().message();
    f.store = std::move(*made);
    for (size_t e = 0; e < saved.size(); ++e) {
      ASSERT_TRUE(
          f.store->Import(e, &saved[e].values, saved[e].m, saved[e].v, saved[e].opt_step, updates)
              .ok());
    }
    ASSERT_TRUE(f.store->Consolidate().ok());
    const ExpertStoreStats stats = f.store->stats();
    std::printf("restore of %zu experts, %s: %llu bytes written, %llu read\n", saved.size(),
                defer ? "deferred" : "initial write", (unsigned long long)stats.bytes_written,
                (unsigned long long)stats.bytes_read);
    if (defer) {
      EXPECT_EQ(stats.bytes_written, saved.size() * kPayload);
      EXPECT_EQ(stats.bytes_read, 0u);
    }
    for (size_t e = 0; e < saved.size(); ++e) {
      Saved got;
      ASSERT_TRUE(f.store->Export(e, &got.values, &got.m, &got.v, &got.opt_step).ok());
      EXPECT_EQ(got.values, saved[e].values) << e;
      EXPECT_EQ(got.m, saved[e].m) << e;
      EXPECT_EQ(got.v, saved[e].v) << e;
      EXPECT_EQ(got.opt_step, saved[e].opt_step) << e;
    }
    ASSERT_TRUE(f.store->BeginStep().ok());
    ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{1, 0, 0, 1}).ok());
    ASSERT_TRUE(f.store->Update(1e-2).ok());
    ASSERT_TRUE(f.store->EndStep().ok());
  }
}

// With defer_initial, an expert the caller does not import gets its initial state (its parts'
// values, zero moments and step) at the first other call, and one whose direct write fails is
// reported by name and stays unwritten until a later write succeeds.
TEST(ExpertStateStoreTest, DeferredInitialStateOfExpertsNotImported) {
  Fixture f(/*cache_experts=*/2, /*sparse=*/false, /*prefetch=*/true, /*defer_initial=*/true);
  EXPECT_EQ(f.store->stats().bytes_written, 0u);
  const size_t n = f.store->entries().size();
  std::vector<std::vector<float>> m, v;
  for (size_t k : kPartSizes) {
    m.emplace_back(k, 0.25f);
    v.emplace_back(k, 0.5f);
  }
  f.fs.AddRule({.op = storage::FaultOp::kWrite, .path_contains = "rank-0.store", .times = -1});
  Status failed = f.store->Import(0, nullptr, m, v, 1, 0);
  for (size_t e = 1; failed.ok() && e < n / 2; ++e)
    failed = f.store->Import(e, nullptr, m, v, 1, 0);
  if (failed.ok()) failed = f.store->Consolidate();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("experts/layer1/expert0"), std::string::npos) << failed.message();
  EXPECT_NE(failed.message().find("/store/rank-0.store"), std::string::npos) << failed.message();
  f.fs.ClearRules();
  for (size_t e = 0; e < n / 2; ++e) ASSERT_TRUE(f.store->Import(e, nullptr, m, v, 1, 0).ok());
  ASSERT_TRUE(f.store->Consolidate().ok());
  EXPECT_EQ(f.store->stats().bytes_written, n * kPayload);
  for (size_t e = 0; e < n; ++e) {
    std::vector<std::vector<float>> values, em, ev;
    int64_t step = -1;
    ASSERT_TRUE(f.store->Export(e, &values, &em, &ev, &step).ok());
    const bool imported = e < n / 2;
    EXPECT_EQ(step, imported ? 1 : 0) << e;
    EXPECT_EQ(em[0][0], imported ? 0.25f : 0.0f) << e;
    EXPECT_EQ(ev[1][0], imported ? 0.5f : 0.0f) << e;
    EXPECT_EQ(values[1], f.tensors[e].value[1]) << e;
  }
}

// The sparse-axis prefetch on a slow device (every store read takes 15 ms more), with 40 ms of
// compute after each layer and for the backward pass: the experts the routing names are read
// behind that compute, so much of the read time is hidden (0.5 measured; at least 0.3 asked),
// and every expert of the exact set
// that was prefetched is used. Without the prefetch every read is waited through. Both runs stay
// bit-identical to the oracle. A prefetch of the wrong experts leaves them unused and the right
// ones read on demand; a prefetch that is off hides nothing. sparse_adam, so that every read is
// one the update needs (in exact mode, an idle expert's replay is needed the moment its layer
// computes, and is read then unless the look-ahead guessed it).
TEST(ExpertStateStoreTest, SparsePrefetchHidesStoreReadsBehindCompute) {
  struct Outcome {
    ExpertStoreStats stats;
    double hidden = 0;
  };
  auto run = [](bool prefetch) {
    Fixture f(/*cache_experts=*/4, /*sparse=*/true, prefetch);
    f.fs.AddRule({.op = storage::FaultOp::kRead,
                  .kind = storage::FaultKind::kDelay,
                  .path_contains = "rank-0.store",
                  .times = -1,
                  .delay_us = 15000});
    const ExpertStoreStats before = f.store->stats();
    TrainAgainstOracle(
        f, /*num_steps=*/6, [] { std::this_thread::sleep_for(std::chrono::milliseconds(40)); },
        /*sparse=*/true);
    Outcome out;
    out.stats = f.store->stats();
    out.hidden = HiddenFraction(out.stats.read_seconds - before.read_seconds,
                                out.stats.read_exposed_seconds - before.read_exposed_seconds);
    return out;
  };
  const Outcome on = run(true);
  const Outcome off = run(false);
  std::printf("hidden fraction: prefetch on %.3f (%llu reads, %llu prefetched), off %.3f (%llu)\n",
              on.hidden, static_cast<unsigned long long>(on.stats.misses),
              static_cast<unsigned long long>(on.stats.prefetched), off.hidden,
              static_cast<unsigned long long>(off.stats.misses));
  EXPECT_GT(on.stats.read_seconds, 0.0);
  EXPECT_GT(on.stats.prefetched, 0u);
  EXPECT_EQ(on.stats.prefetch_unused, 0u);
  EXPECT_GE(on.hidden, 0.3);
  EXPECT_EQ(off.stats.prefetched, 0u);
  EXPECT_GT(off.stats.read_seconds, 0.0);
  EXPECT_LE(off.hidden, 0.05);
}

// The working set with the prefetch's staging (expert_state_store.h, "Staged states"): every
// expert staged, some of them (the rest through the cache), or none; bit for bit the oracle's.
TEST(ExpertStateStoreTest, StagedStatesEqualTheOracle) {
  for (size_t staging : {size_t{0}, size_t{3}, size_t{8}}) {
    SCOPED_TRACE("staging " + std::to_string(staging));
    Fixture f(/*cache_experts=*/2, /*sparse=*/false, /*prefetch=*/true, /*defer_initial=*/false,
              /*working_set=*/true, staging);
    TrainAgainstOracle(f, /*num_steps=*/6);
    EXPECT_EQ(f.store->stats().staged > 0, staging > 0);
  }
}

// Waits (at most 30 s) until the counter `field` of the store's stats has grown by `amount` since
// `from`; how much it grew.
uint64_t AwaitStat(Fixture& f, uint64_t ExpertStoreStats::*field, uint64_t from, uint64_t amount) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint64_t grown = f.store->stats().*field - from;
  while (grown < amount && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    grown = f.store->stats().*field - from;
  }
  return grown;
}

// The optimizer phase waits on no read: the m and v of the experts the forward activated are read
// behind the forward and the backward (issued with their masters), so that by Update the store
// has read each of them whole, once; Update reads nothing and writes every state (durable by the
// next Consolidate, which a checkpoint starts with). A next step that activates them again keeps
// their staged states and reads nothing.
TEST(ExpertStateStoreTest, StagedMomentsAreReadBeforeTheUpdate) {
  Fixture f(/*cache_experts=*/2, /*sparse=*/false, /*prefetch=*/true, /*defer_initial=*/false,
            /*working_set=*/true, /*staging_experts=*/8);
  ASSERT_TRUE(f.store->BeginStep().ok());
  BindAll(f);
  const ExpertStoreStats before = f.store->stats();
  ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{1, 1, 1, 1}).ok());
  ASSERT_TRUE(f.store->Prepare(3, 0, std::vector<int64_t>{1, 1, 1, 1}).ok());
  for (Tensors& t : f.tensors) {
    for (std::vector<float>& g : t.grad) std::fill(g.begin(), g.end(), 0.5f);
  }
  // Before the optimizer phase: every expert's whole extent (master, m, v, the counts). The store
  // counts its bytes just before it hands a read over, so wait for the hand-overs as well.
  EXPECT_EQ(AwaitStat(f, &ExpertStoreStats::bytes_read, before.bytes_read, 8 * kPayload),
            8 * kPayload);
  EXPECT_EQ(AwaitStat(f, &ExpertStoreStats::staged_reads_landed, before.staged_reads_landed, 8),
            8u);
  const ExpertStoreStats forward = f.store->stats();
  ASSERT_TRUE(f.store->Update(0.1).ok());
  const ExpertStoreStats updated = f.store->stats();
  EXPECT_EQ(updated.bytes_read, forward.bytes_read);  // Update read nothing
  EXPECT_EQ(updated.staged - before.staged, 8u);
  EXPECT_EQ(updated.staged_ready - before.staged_ready, 8u);
  ASSERT_TRUE(f.store->EndStep().ok());
  // The next step activates them all again: each keeps its staged state, nothing is read.
  ASSERT_TRUE(f.store->BeginStep().ok());
  BindAll(f);
  const ExpertStoreStats second = f.store->stats();
  ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{1, 1, 1, 1}).ok());
  ASSERT_TRUE(f.store->Prepare(3, 0, std::vector<int64_t>{1, 1, 1, 1}).ok());
  ASSERT_TRUE(f.store->Update(0.1).ok());
  ASSERT_TRUE(f.store->EndStep().ok());
  EXPECT_EQ(f.store->stats().bytes_read, second.bytes_read);
  EXPECT_EQ(f.store->stats().hits - second.hits, 8u);
  ASSERT_TRUE(f.store->Consolidate().ok());
  EXPECT_EQ(f.store->stats().bytes_written - before.bytes_written, 2 * 8 * kPayload);
  std::vector<std::vector<float>> m, v;
  int64_t step = 0;
  ASSERT_TRUE(f.store->Export(5, nullptr, &m, &v, &step).ok());
  EXPECT_EQ(step, 2);
  EXPECT_NE(m[0][0], 0.0f);
}

// A staged read that fails (its master read, the rest not) fails the Update with the expert and
// the store file; a step without an update (skipped) still verifies the master at EndStep.
TEST(ExpertStateStoreTest, AFailedStagedReadNamesTheExpert) {
  for (bool update : {true, false}) {
    SCOPED_TRACE(update ? "update" : "skipped step");
    Fixture f(/*cache_experts=*/2, /*sparse=*/false, /*prefetch=*/true, /*defer_initial=*/false,
              /*working_set=*/true, /*staging_experts=*/8);
    ASSERT_TRUE(f.store->BeginStep().ok());
    BindAll(f);
    // The master's read goes through; the rest's fails.
    f.fs.AddRule(
        {.op = storage::FaultOp::kRead, .path_contains = "rank-0.store", .skip = 1, .times = -1});
    ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{0, 1, 0, 0}).ok());
    const Status s = update ? f.store->Update(0.1) : f.store->EndStep();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(f.fs.faults_fired(), 1);
    EXPECT_NE(s.message().find("experts/layer1/expert1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("/store/rank-0.store"), std::string::npos) << s.message();
    // Once the device recovers, the store serves the last durable state again.
    f.fs.ClearRules();
    ASSERT_TRUE(f.store->BeginStep().ok());
    BindAll(f);
    ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{0, 1, 0, 0}).ok());
    EXPECT_TRUE(f.store->Update(0.1).ok());
    EXPECT_TRUE(f.store->EndStep().ok());
  }
}

// The staged states' writes overlap the next step's forward: a failed one (ENOSPC) is returned by
// the next call that waits for it (here the checkpoint's Consolidate), naming the expert, the
// file and the fix; the store keeps its previous generation.
TEST(ExpertStateStoreTest, AFailedStagedWriteIsReturnedByTheCheckpoint) {
  Fixture f(/*cache_experts=*/2, /*sparse=*/false, /*prefetch=*/true, /*defer_initial=*/false,
            /*working_set=*/true, /*staging_experts=*/8);
  ASSERT_TRUE(f.store->BeginStep().ok());
  BindAll(f);
  ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{0, 0, 1, 0}).ok());
  for (float& g : f.tensors[2].grad[0]) g = 1.0f;
  f.fs.AddRule({.op = storage::FaultOp::kWrite,
                .error = ENOSPC,
                .path_contains = "rank-0.store",
                .times = -1});
  ASSERT_TRUE(f.store->Update(0.1).ok());
  ASSERT_TRUE(f.store->EndStep().ok());  // the write is still on its way, or failed unread
  const Status s = f.store->Consolidate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("experts/layer1/expert2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/store/rank-0.store"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("point expert_store.dir at a larger disk"), std::string::npos)
      << s.message();
  f.fs.ClearRules();
  // The previous generation: the initial state, never updated.
  std::vector<std::vector<float>> m, v;
  int64_t step = -1;
  ASSERT_TRUE(f.store->Export(2, nullptr, &m, &v, &step).ok());
  EXPECT_EQ(step, 0);
}

TEST(ExpertStateStoreTest, SparseAdamLeavesIdleExpertsAlone) {
  Fixture f(/*cache_experts=*/3, /*sparse=*/true);
  const std::vector<float> before = f.tensors[1].value[0];
  ASSERT_TRUE(f.store->BeginStep().ok());
  std::vector<int64_t> rows = {5, 0, 0, 0};
  ASSERT_TRUE(f.store->Prepare(1, 0, rows).ok());
  for (float& g : f.tensors[0].grad[0]) g = 1.0f;
  ASSERT_TRUE(f.store->Update(0.1).ok());
  ASSERT_TRUE(f.store->EndStep().ok());
  ASSERT_TRUE(f.store->Consolidate().ok());
  EXPECT_EQ(f.tensors[1].value[0], before);  // idle: no weight decay, no step
  std::vector<std::vector<float>> m, v;
  int64_t step = -1;
  ASSERT_TRUE(f.store->Export(1, nullptr, &m, &v, &step).ok());
  EXPECT_EQ(step, 0);
  ASSERT_TRUE(f.store->Export(0, nullptr, &m, &v, &step).ok());
  EXPECT_EQ(step, 1);
  EXPECT_NE(m[0][0], 0.0f);
}

TEST(ExpertStateStoreTest, ReadErrorNamesTheExpertAndTheFile) {
  Fixture f(/*cache_experts=*/1);
  ASSERT_TRUE(f.store->BeginStep().ok());
  ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{1, 1, 0, 0}).ok());
  f.fs.AddRule({.op = storage::FaultOp::kRead, .path_contains = "rank-0.store", .times = -1});
  const Status s = f.store->Update(0.1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("experts/layer1/expert"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/store/rank-0.store"), std::string::npos) << s.message();
  // Once the device recovers, the store serves the last durable state again.
  f.fs.ClearRules();
  ASSERT_TRUE(f.store->BeginStep().ok());
  ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{0, 0, 1, 0}).ok());
  EXPECT_TRUE(f.store->Update(0.1).ok());
}

TEST(ExpertStateStoreTest, WriteErrorNamesTheFileAndKeepsThePreviousGeneration) {
  Fixture f(/*cache_experts=*/4);
  ASSERT_TRUE(f.store->BeginStep().ok());
  ASSERT_TRUE(f.store->Prepare(1, 0, std::vector<int64_t>{1, 0, 0, 0}).ok());
  for (float& g : f.tensors[0].grad[0]) g = 1.0f;
  f.fs.AddRule({.op = storage::FaultOp::kWrite,
                .error = ENOSPC,
                .path_contains = "rank-0.store",
                .times = -1});
  // The update starts the expert's write-back behind it (write-behind); its failure ends the step.
  ASSERT_TRUE(f.store->Update(0.1).ok());
  const Status s = f.store->EndStep();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/store/rank-0.store"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("experts/layer1/expert0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("point expert_store.dir at a larger disk"), std::string::npos)
      << s.message();
  f.fs.ClearRules();
  // The update is still in the cache, dirty; the next write-back makes it durable.
  EXPECT_TRUE(f.store->EndStep().ok());
}

// A store file of this model written with another number of experts per rank (a run at another
// world size or ep_size) is rebuilt for this rank's experts: the file holds the new layout after.
// One of another model (another expert size) is refused, naming the file; nothing is deleted.
TEST(ExpertStateStoreTest, AnotherWorldSizesStoreIsRebuiltAnotherModelsRefused) {
  storage::MemFileSystem fs;
  ThreadPool pool(2);
  std::unique_ptr<Optimizer> optimizer = MakeAdamW(&pool);
  const std::string path = "/store/rank-0.store";
  std::vector<Tensors> tensors;
  auto open = [&](int experts, size_t scale) {
    ExpertStateStoreOptions options;
    options.path = path;
    options.fs = &fs;
    options.cache_bytes = 2 * scale * kExtent;
    return ExpertStateStore::Create(options, optimizer.get(),
                                    MakeEntries(experts, scale, &tensors));
  };
  auto stored_experts = [&] {
    Result<std::unique_ptr<storage::ExpertStore>> opened = storage::ExpertStore::Open(&fs, path);
    SY_CHECK(opened.ok()) << opened.status().message();
    return (*opened)->num_experts();
  };
  ASSERT_TRUE(open(kExperts, 1).ok());
  EXPECT_EQ(stored_experts(), static_cast<uint32_t>(kExperts));

  Result<std::unique_ptr<ExpertStateStore>> fewer = open(kExperts / 2, 1);
  ASSERT_TRUE(fewer.ok()) << fewer.status().message();
  // It serves the new layout's experts: each exports its fresh state (moments zero, no step).
  ASSERT_EQ((*fewer)->entries().size(), static_cast<size_t>(kLayers * kExperts / 2));
  for (size_t e = 0; e < (*fewer)->entries().size(); ++e) {
    std::vector<std::vector<float>> m, v;
    int64_t step = -1;
    ASSERT_TRUE((*fewer)->Export(e, nullptr, &m, &v, &step).ok());
    EXPECT_EQ(step, 0);
    EXPECT_EQ(m[1], std::vector<float>(kPartSizes[1], 0.0f));
  }
  fewer->reset();
  EXPECT_EQ(stored_experts(), static_cast<uint32_t>(kExperts / 2));

  Result<std::unique_ptr<ExpertStateStore>> other = open(kExperts / 2, 2);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find(path + " holds another model's expert states"),
            std::string::npos)
      << other.status().message();
  EXPECT_EQ(stored_experts(), static_cast<uint32_t>(kExperts / 2));
}

}  // namespace
}  // namespace sy::launcher
