// ZeRO-3 over OpenMPI (parallel/zero3.h): an MoeModel whose dense parameters are sharded over the
// ranks, trained on each rank's slice of a fixed global batch, against the same model trained in
// one process (built in this process from the same seed) on the global batch with the plain
// optimizer. The experts are replicated here: the test sums their gradients over the ranks and
// steps them with the same optimizer. Run with 2, 3 (padded units) and 4 ranks.
//
// Checked: every parameter and the dense optimizer moments after the steps; the losses; the
// memory (the dense parameter count against a closed-form count from the config, the shard
// bytes 16*D/N per rank and 16*D plus padding over the ranks, no full copy committed after a step,
// at most two units gathered during a forward, and the resident set from /proc/self/statm against
// the committed bytes); gradient accumulation over two micro-batches, the squared norm and a
// scaled SGD step; the exact round trip of full parameters and of the optimizer state; the order
// of the layer hooks; refusals.
//
// Tolerance: |zero3 - ref| <= 2e-5 * max(1, max |ref|) per tensor after the steps. The sharded
// run sums the gradient over ranks (each rank's tokens, prescaled) where the reference sums over
// the whole batch, so float32 rounding differs in the last bits; AdamW normalises the update by
// sqrt(v), which carries such differences into the parameters at about lr * 1e-3 per step at
// most (measured errors are in docs/parallel.md).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/zero3.h"
#include "runtime/model/moe_model.h"
#include "tests/model/model_test_util.h"
#include "tests/parallel/mpi_test_env.h"
#include "tests/parallel/train_compare.h"

namespace sy {
namespace {

using testing::TestMpi;

constexpr uint64_t kSeed = 4321;
constexpr float kRelTol = 2e-5f;
constexpr int kSteps = 6;
constexpr double kLr = 1e-2;
constexpr int64_t kBatch = 8;
constexpr int64_t kSeqLen = 6;

// Dense layer 0, MoE layers 1 and 2 (MoE layer 0 holds the pre-gate of MoE layer 1), shared
// experts with their gate, q/k norms and attention biases: every kind of dense parameter.
ModelConfig ZeroConfig() {
  ModelConfig c = testing::TinyConfig();  // aux and z loss off
  c.num_layers = 3;
  c.first_k_dense = 1;
  c.num_kv_heads = 2;
  c.num_shared_experts = 1;
  c.shared_expert_gate = true;
  c.pregate = true;
  c.qk_norm = true;
  c.attention_bias = true;
  // Dropless: capacity would count each rank's own tokens.
  c.capacity_factor = 0.0;
  return c;
}

// The dense parameter count from the parameter list in runtime/model/parameter_store.h, written
// out from the config (not from the model).
int64_t DenseCountFromConfig(const ModelConfig& c) {
  const int64_t h = c.hidden_size, v = c.vocab_size, hd = c.dim_per_head();
  const int64_t q = c.num_heads * hd, kv = c.kv_heads() * hd;
  int64_t n = v * h + h + (c.tie_word_embeddings ? 0 : v * h);  // embed, final_norm, lm_head
  for (int l = 0; l < c.num_layers; ++l) {
    n += 2 * h;                       // input_norm, post_attention_norm
    n += q * h + 2 * kv * h + h * q;  // wq, wk, wv, wo
    if (c.attention_bias) n += q + 2 * kv;
    if (c.qk_norm) n += c.qk_norm_per_head ? 2 * hd : q + kv;
    const int m = c.MoeIndex(l);
    if (m < 0) {
      n += 3 * h * c.intermediate_size;
      continue;
    }
    if (c.MoeLayerHasGate(m)) n += c.num_experts * h;
    if (c.MoeLayerHasPregate(m)) n += c.num_experts * h;
    n += 3 * h * c.shared_intermediate();
    if (c.shared_expert_gate) n += h;
  }
  return n;
}

// The global batch: tokens and targets [kBatch, kSeqLen], with some ignored targets so that the
// ranks hold different numbers of targets.
struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch GlobalBatch(const ModelConfig& c, int step) {
  Batch b;
  const size_t n = static_cast<size_t>(kBatch * kSeqLen);
  b.tokens = testing::RandomTokens(n, c.vocab_size, 100 + static_cast<uint64_t>(step));
  b.targets = testing::RandomTokens(n, c.vocab_size, 200 + static_cast<uint64_t>(step));
  for (size_t i = 0; i < n; ++i) {
    if ((i * 7 + static_cast<size_t>(step)) % 5 == 0) b.targets[i] = -1;
  }
  return b;
}

int64_t CountTargets(const std::vector<int32_t>& targets, size_t begin, size_t end) {
  int64_t n = 0;
  for (size_t i = begin; i < end; ++i) n += targets[i] >= 0 ? 1 : 0;
  return n;
}

using testing::AdamW;
using testing::PlainState;
using testing::PlainStep;
using testing::RelError;
using testing::Values;

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::unique_ptr<MoeModel> MakeModel(Backend& backend, const ModelConfig& config) {
  auto model = MoeModel::Create(backend, config);
  SY_CHECK_OK(model.status());
  SY_CHECK_OK((*model)->InitializeParameters(kSeed));
  return std::move(*model);
}

// The reference model and the model to shard, built alike from kSeed, and this rank's rows of
// the global batch (kBatch rows split into contiguous slices; the last rank may hold fewer).
struct TwoModels {
  MpiCommunicator& world = TestMpi().world();
  const int n_ranks = world.size(), me = world.rank();
  const ModelConfig config = ZeroConfig();
  std::unique_ptr<Backend> backend = testing::MakeBackend(Device::Cpu());
  std::unique_ptr<MoeModel> ref = MakeModel(*backend, config);
  std::unique_ptr<MoeModel> model = MakeModel(*backend, config);
  const int64_t rows = (kBatch + n_ranks - 1) / n_ranks;
  const int64_t row_begin = std::min<int64_t>(kBatch, me* rows);
  const int64_t row_end = std::min<int64_t>(kBatch, row_begin + rows);
  const size_t tok_begin = static_cast<size_t>(row_begin * kSeqLen);
  const size_t tok_end = static_cast<size_t>(row_end * kSeqLen);

  // This rank's part of `ids` ([kBatch, kSeqLen] of the global batch).
  Tensor Local(const std::vector<int32_t>& ids) const {
    return testing::HostI32(std::vector<int32_t>(ids.begin() + tok_begin, ids.begin() + tok_end),
                            Shape{row_end - row_begin, kSeqLen});
  }
  // Local targets / global targets: the weight of this rank's mean CE in the global mean.
  float Share(const Batch& b) const {
    return static_cast<float>(CountTargets(b.targets, tok_begin, tok_end)) /
           static_cast<float>(CountTargets(b.targets, 0, b.targets.size()));
  }
};

struct TrainResult {
  double max_param_error = 0.0;
  double max_moment_error = 0.0;
  std::vector<std::vector<float>> final_values;  // dense and expert, in store order
};

// Trains the reference in one process and the ZeRO-3 model on the ranks; compares.
TrainResult TrainAndCompare(bool prefetch) {
  TwoModels t;
  MpiCommunicator& world = t.world;
  const int me = t.me;
  MoeModel* ref = t.ref.get();
  MoeModel* model = t.model.get();

  auto ref_opt = CreateOptimizer(AdamW(), nullptr);
  auto expert_opt = CreateOptimizer(AdamW(), nullptr);
  SY_CHECK(ref_opt.ok() && expert_opt.ok());
  std::map<std::string, PlainState> ref_states, expert_states;

  Zero3Options options;
  options.prefetch = prefetch;
  options.optimizer = AdamW();
  auto zero = Zero3::Create(*model, world, options, nullptr);
  SY_CHECK_OK(zero.status());
  if (me == 0 && prefetch) std::printf("%s\n", FormatZero3Memory((*zero)->memory()).c_str());

  SY_CHECK(t.row_end > t.row_begin) << "every rank needs a row";

  for (int step = 0; step < kSteps; ++step) {
    const Batch b = GlobalBatch(t.config, step);
    // Reference: the global batch in one process.
    ref->ZeroGrads();
    auto ref_loss = ref->Forward(testing::HostI32(b.tokens, Shape{kBatch, kSeqLen}),
                                 testing::HostI32(b.targets, Shape{kBatch, kSeqLen}));
    SY_CHECK_OK(ref_loss.status());
    SY_CHECK_OK(ref->Backward());
    PlainStep(**ref_opt, *ref, ref_states, kLr, [](const Parameter&) { return true; });

    // ZeRO-3: this rank's rows; each rank's gradient weighs its targets by 1 / global targets.
    const float prescale = t.Share(b);
    (*zero)->ZeroGrads();
    (*zero)->set_gradient_prescale(prescale);
    (*zero)->ResetPeakMemory();
    auto loss = model->Forward(t.Local(b.tokens), t.Local(b.targets));
    SY_CHECK_OK(loss.status());
    const Zero3MemoryReport after_forward = (*zero)->memory();
    EXPECT_LE(after_forward.peak_gathered_units, 2) << "units gathered at once in a forward";
    EXPECT_EQ(after_forward.committed_bytes, 0) << "full copies left after the forward";
    SY_CHECK_OK(model->Backward());
    // The global mean CE is the sum over ranks of the prescaled local means.
    double global_ce = static_cast<double>(loss->ce_loss) * prescale;
    SY_CHECK_OK(world.AllReduce(&global_ce, &global_ce, 1, DType::kF64, Reduction::kSum));
    EXPECT_NEAR(global_ce, ref_loss->ce_loss, 1e-5 * std::max(1.0, double(ref_loss->ce_loss)))
        << "step " << step;

    // Experts are replicated: sum their (prescaled) gradients and step them everywhere.
    for (Parameter& p : model->parameters()) {
      if (!p.is_expert) continue;
      float* g = p.grad.data<float>();
      for (int64_t i = 0; i < p.grad.numel(); ++i) g[i] *= prescale;
      SY_CHECK_OK(world.AllReduceInPlace<float>(
          std::span<float>(g, static_cast<size_t>(p.grad.numel())), Reduction::kSum));
    }
    SY_CHECK_OK((*zero)->Step(kLr));
    PlainStep(**expert_opt, *model, expert_states, kLr,
              [](const Parameter& p) { return p.is_expert; });
    EXPECT_EQ((*zero)->memory().committed_bytes, 0) << "full copies left after the step";
  }

  TrainResult result;
  SY_CHECK_OK((*zero)->GatherFullParameters());
  for (Parameter& p : model->parameters()) {
    const Parameter* r = ref->parameters().Find(p.name);
    SY_CHECK(r != nullptr);
    const float err = RelError(Values(p.value), Values(r->value));
    EXPECT_LE(err, kRelTol) << p.name;
    result.max_param_error = std::max<double>(result.max_param_error, err);
    result.final_values.push_back(Values(p.value));
  }
  auto states = (*zero)->GatherOptimizerState();
  SY_CHECK_OK(states.status());
  for (const DenseOptimizerState& s : *states) {
    const PlainState& want = ref_states.at(s.name);
    EXPECT_EQ(s.step, kSteps) << s.name;
    const float em = RelError(s.m, want.m), ev = RelError(s.v, want.v);
    EXPECT_LE(em, kRelTol) << s.name << " m";
    EXPECT_LE(ev, kRelTol) << s.name << " v";
    result.max_moment_error = std::max<double>(result.max_moment_error, std::max(em, ev));
  }
  double worst[2] = {result.max_param_error, result.max_moment_error};
  SY_CHECK_OK(world.AllReduce(worst, worst, 2, DType::kF64, Reduction::kMax));
  if (me == 0) {
    std::printf(
        "ZeRO-3 on %d ranks, %d AdamW steps, prefetch %s: max rel. error parameters %.3g, "
        "moments %.3g\n",
        t.n_ranks, kSteps, prefetch ? "on" : "off", worst[0], worst[1]);
  }
  return result;
}

TEST(Zero3MpiTest, TrainingMatchesOneProcess) {
  const TrainResult with_prefetch = TrainAndCompare(/*prefetch=*/true);
  // The schedule changes when the collectives run, never what they compute.
  const TrainResult without = TrainAndCompare(/*prefetch=*/false);
  ASSERT_EQ(with_prefetch.final_values.size(), without.final_values.size());
  for (size_t i = 0; i < without.final_values.size(); ++i) {
    EXPECT_EQ(with_prefetch.final_values[i], without.final_values[i]) << "parameter " << i;
  }
}

TEST(Zero3MpiTest, MemoryPerRank) {
  MpiCommunicator& world = TestMpi().world();
  const int n_ranks = world.size();
  // Wide enough that the resident-set check sees megabytes (embedding and head 2 MiB each).
  ModelConfig config = ZeroConfig();
  config.vocab_size = 8192;
  config.hidden_size = 64;
  config.head_dim = 16;
  config.intermediate_size = 128;
  config.moe_intermediate_size = 64;
  auto backend = testing::MakeBackend(Device::Cpu());
  auto model = MakeModel(*backend, config);
  int64_t dense_from_store = 0;
  for (const Parameter& p : model->parameters())
    dense_from_store += p.is_expert ? 0 : p.value.numel();
  const int64_t dense = DenseCountFromConfig(config);
  ASSERT_EQ(dense_from_store, dense) << "the model's dense parameters differ from the config's";

  const int64_t rss_before_create = ResidentBytes();
  auto zero = Zero3::Create(*model, world, Zero3Options{}, nullptr);
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  const Zero3MemoryReport r = (*zero)->memory();
  if (world.rank() == 0) std::printf("%s\n", FormatZero3Memory(r).c_str());
  EXPECT_EQ(r.world, n_ranks);
  EXPECT_EQ(r.dense_elements, dense);
  EXPECT_EQ(r.num_units, config.num_layers + 2);
  EXPECT_GE(r.padded_elements, dense);
  EXPECT_LE(r.padded_elements, dense + static_cast<int64_t>(r.num_units) * (n_ranks - 1));
  EXPECT_EQ(r.padded_elements % n_ranks, 0);
  EXPECT_EQ(r.shard_elements * n_ranks, r.padded_elements);
  // AdamW: master, m, v and grad, 4 bytes each.
  EXPECT_EQ(r.shard_bytes, 16 * r.shard_elements);
  int64_t total_shard_bytes = r.shard_bytes;
  ASSERT_TRUE(
      world.AllReduce(&total_shard_bytes, &total_shard_bytes, 1, DType::kI64, Reduction::kSum)
          .ok());
  EXPECT_EQ(total_shard_bytes, 16 * r.padded_elements);
  EXPECT_LE(total_shard_bytes, 16 * (dense + static_cast<int64_t>(r.num_units) * (n_ranks - 1)));
  EXPECT_EQ(r.committed_bytes, 0);
  EXPECT_GE(r.full_copy_bytes, 2 * 4 * dense);  // every parameter and gradient, page-rounded

  // Create releases the initialised dense parameters (4 D bytes) and fills the shards; the resident
  // set then grows by the committed bytes when everything is gathered and drops back on release.
  // Under ThreadSanitizer the resident set also holds the shadow of every page touched, and its
  // allocator keeps freed blocks, so it no longer measures the shards: the accounting above and
  // below still runs, the resident-set comparisons do not.
#if defined(__SANITIZE_THREAD__)
  constexpr bool kResidentSetMeasuresTheShards = false;
#else
  constexpr bool kResidentSetMeasuresTheShards = true;
#endif
  const int64_t rss_released = ResidentBytes();
  const int64_t slack = 256 * 1024;
  if (kResidentSetMeasuresTheShards) {
    EXPECT_LT(rss_released, rss_before_create - 4 * dense + r.shard_bytes + slack);
  }
  ASSERT_TRUE((*zero)->GatherFullParameters().ok());
  const int64_t committed = (*zero)->memory().committed_bytes;
  EXPECT_GE(committed, 4 * dense);
  EXPECT_LT(committed,
            4 * dense + static_cast<int64_t>(2 * 4096) * 64);  // per-tensor page rounding
  const int64_t rss_gathered = ResidentBytes();
  (*zero)->ReleaseFullParameters();
  const int64_t rss_after = ResidentBytes();
  if (kResidentSetMeasuresTheShards) {
    EXPECT_NEAR(static_cast<double>(rss_gathered - rss_released), static_cast<double>(committed),
                static_cast<double>(slack));
    EXPECT_NEAR(static_cast<double>(rss_gathered - rss_after), static_cast<double>(committed),
                static_cast<double>(slack));
  }
  EXPECT_EQ((*zero)->memory().committed_bytes, 0);
  if (world.rank() == 0) {
    std::printf(
        "resident set: %.2f MiB before Create, %.2f released, %.2f gathered (+%.2f MiB, "
        "counted %.2f MiB), %.2f released again\n",
        rss_before_create / 1048576.0, rss_released / 1048576.0, rss_gathered / 1048576.0,
        (rss_gathered - rss_released) / 1048576.0, committed / 1048576.0, rss_after / 1048576.0);
  }

  // One training step: peak of full copies, nothing left committed afterwards.
  const Batch b = GlobalBatch(config, 0);
  (*zero)->ZeroGrads();
  (*zero)->ResetPeakMemory();
  auto loss = model->Forward(testing::HostI32(b.tokens, Shape{kBatch, kSeqLen}),
                             testing::HostI32(b.targets, Shape{kBatch, kSeqLen}));
  ASSERT_TRUE(loss.ok()) << loss.status().ToString();
  EXPECT_LE((*zero)->memory().peak_gathered_units, 2);
  ASSERT_TRUE(model->Backward().ok());
  ASSERT_TRUE((*zero)->Step(1e-3).ok());
  const Zero3MemoryReport after = (*zero)->memory();
  EXPECT_EQ(after.committed_bytes, 0);
  EXPECT_EQ(after.gathered_units, 0);
  EXPECT_GT(after.peak_committed_bytes, 0);
  EXPECT_LT(after.peak_committed_bytes, after.full_copy_bytes);
  // Backward: the current unit, the prefetched one and the one being reduce-scattered.
  EXPECT_LE(after.peak_gathered_units, 3);
  if (world.rank() == 0) std::printf("after a step:\n%s\n", FormatZero3Memory(after).c_str());
}

// Two micro-batches accumulate in the gradient shards; the squared norm, a scaling and a plain
// SGD step (no optimizer state: 8 bytes per owned element) match the one-process gradients.
TEST(Zero3MpiTest, MicroBatchesAccumulateAndNormMatches) {
  TwoModels t;
  MoeModel* ref = t.ref.get();
  MoeModel* model = t.model.get();
  MpiCommunicator& world = t.world;
  Zero3Options options;
  options.optimizer.kind = OptimizerKind::kSgd;
  auto zero = Zero3::Create(*model, world, options, nullptr);
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_EQ((*zero)->memory().shard_bytes, 8 * (*zero)->memory().shard_elements);

  // Micro-batch k is GlobalBatch(k); each rank holds its rows of it.
  ref->ZeroGrads();
  (*zero)->ZeroGrads();
  for (int k = 0; k < 2; ++k) {
    const Batch b = GlobalBatch(t.config, k);
    ASSERT_TRUE(ref->Forward(testing::HostI32(b.tokens, Shape{kBatch, kSeqLen}),
                             testing::HostI32(b.targets, Shape{kBatch, kSeqLen}))
                    .ok());
    ASSERT_TRUE(ref->Backward().ok());  // adds the micro-batch's mean gradient
    (*zero)->set_gradient_prescale(t.Share(b));
    ASSERT_TRUE(model->Forward(t.Local(b.tokens), t.Local(b.targets)).ok());
    ASSERT_TRUE(model->Backward().ok());
  }
  double ref_sq = 0.0;
  for (const Parameter& p : ref->parameters()) {
    if (p.is_expert) continue;
    for (float g : Values(p.grad)) ref_sq += static_cast<double>(g) * g;
  }
  double sq = (*zero)->LocalGradSquaredNorm();
  ASSERT_TRUE(world.AllReduce(&sq, &sq, 1, DType::kF64, Reduction::kSum).ok());
  EXPECT_NEAR(sq, ref_sq, 1e-5 * ref_sq);
  (*zero)->ScaleGradients(0.5f);
  double half_sq = (*zero)->LocalGradSquaredNorm();
  ASSERT_TRUE(world.AllReduce(&half_sq, &half_sq, 1, DType::kF64, Reduction::kSum).ok());
  EXPECT_NEAR(half_sq, 0.25 * sq, 1e-6 * sq);

  // SGD with lr 2 on the halved gradient: p - g, against the reference's p - g.
  ASSERT_TRUE((*zero)->Step(2.0).ok());
  ASSERT_TRUE((*zero)->GatherFullParameters().ok());
  float worst = 0.0f;
  for (Parameter& p : model->parameters()) {
    if (p.is_expert) continue;
    const Parameter* r = ref->parameters().Find(p.name);
    std::vector<float> want = Values(r->value);
    const std::vector<float> g = Values(r->grad);
    for (size_t i = 0; i < want.size(); ++i) want[i] -= g[i];
    const float err = RelError(Values(p.value), want);
    EXPECT_LE(err, kRelTol) << p.name;
    worst = std::max(worst, err);
  }
  if (t.me == 0) {
    std::printf("two micro-batches, SGD: |g|^2 %.6g vs %.6g, max rel. error %.3g\n", sq, ref_sq,
                worst);
  }
}

TEST(Zero3MpiTest, FullParametersAndOptimizerStateRoundTripExactly) {
  MpiCommunicator& world = TestMpi().world();
  const ModelConfig config = ZeroConfig();
  auto backend = testing::MakeBackend(Device::Cpu());
  auto model = MakeModel(*backend, config);
  auto zero = Zero3::Create(*model, world, Zero3Options{}, nullptr);
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();

  // Distinct values in every dense element (the same on every rank), loaded and gathered back.
  std::map<std::string, std::vector<float>> written;
  int64_t k = 0;
  for (Parameter& p : model->parameters()) {
    if (p.is_expert) continue;
    float* v = p.value.data<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i, ++k) v[i] = 0.25f + static_cast<float>(k) * 1e-3f;
    written[p.name] = Values(p.value);
  }
  ASSERT_TRUE((*zero)->LoadFullParameters().ok());
  for (Parameter& p : model->parameters()) {
    if (p.is_expert) continue;
    // Released pages read back as zeros: the full copy is really gone.
    const std::vector<float> released = Values(p.value);
    EXPECT_TRUE(std::all_of(released.begin(), released.end(), [](float x) { return x == 0.0f; }))
        << p.name;
  }
  ASSERT_TRUE((*zero)->GatherFullParameters().ok());
  for (Parameter& p : model->parameters()) {
    if (!p.is_expert) {
      EXPECT_EQ(Values(p.value), written.at(p.name)) << p.name;
    }
  }

  // Optimizer state: load full states, gather them back.
  std::vector<DenseOptimizerState> states;
  int unit_step = 0;
  int last_unit = -1;
  for (const Parameter& p : model->parameters()) {
    if (p.is_expert) continue;
    if (model->UnitOf(p) != last_unit) ++unit_step, last_unit = model->UnitOf(p);
    DenseOptimizerState s;
    s.name = p.name;
    s.step = unit_step;
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      s.m.push_back(static_cast<float>(i) * 0.5f - 3.0f);
      s.v.push_back(static_cast<float>(i) * 0.125f + static_cast<float>(unit_step));
    }
    states.push_back(std::move(s));
  }
  ASSERT_TRUE((*zero)->LoadOptimizerState(states).ok());
  auto back = (*zero)->GatherOptimizerState();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    EXPECT_EQ((*back)[i].name, states[i].name);
    EXPECT_EQ((*back)[i].step, states[i].step) << states[i].name;
    EXPECT_EQ((*back)[i].m, states[i].m) << states[i].name;
    EXPECT_EQ((*back)[i].v, states[i].v) << states[i].name;
  }

  // Refusals: a missing parameter, a wrong size, different steps within a unit.
  std::vector<DenseOptimizerState> missing(states.begin() + 1, states.end());
  EXPECT_EQ((*zero)->LoadOptimizerState(missing).code(), StatusCode::kInvalidArgument);
  std::vector<DenseOptimizerState> short_m = states;
  short_m[0].m.pop_back();
  EXPECT_EQ((*zero)->LoadOptimizerState(short_m).code(), StatusCode::kInvalidArgument);
  std::vector<DenseOptimizerState> steps = states;
  size_t second_of_unit = 1;
  while (model->UnitOf(*model->parameters().Find(steps[second_of_unit].name)) !=
         model->UnitOf(*model->parameters().Find(steps[second_of_unit - 1].name))) {
    ++second_of_unit;
  }
  steps[second_of_unit].step += 1;
  EXPECT_EQ((*zero)->LoadOptimizerState(steps).code(), StatusCode::kInvalidArgument);
}

// Records the hook calls MoeModel makes.
class RecordingHooks final : public LayerHooks {
 public:
  Status BeforeForward(int unit) override { return Add("F+", unit); }
  Status AfterForward(int unit) override { return Add("F-", unit); }
  Status BeforeBackward(int unit) override { return Add("B+", unit); }
  Status AfterBackward(int unit) override { return Add("B-", unit); }
  std::vector<std::string> calls;

 private:
  Status Add(const char* what, int unit) {
    calls.push_back(what + std::to_string(unit));
    return Status::Ok();
  }
};

TEST(Zero3MpiTest, ModelCallsHooksInForwardAndBackwardOrder) {
  const ModelConfig config = ZeroConfig();
  auto backend = testing::MakeBackend(Device::Cpu());
  auto model = MakeModel(*backend, config);
  RecordingHooks hooks;
  model->set_layer_hooks(&hooks);
  const Batch b = GlobalBatch(config, 0);
  ASSERT_TRUE(model
                  ->Forward(testing::HostI32(b.tokens, Shape{kBatch, kSeqLen}),
                            testing::HostI32(b.targets, Shape{kBatch, kSeqLen}))
                  .ok());
  ASSERT_TRUE(model->Backward().ok());
  std::vector<std::string> want;
  const int units = config.num_layers + 2;
  ASSERT_EQ(model->num_units(), units);
  for (int u = 0; u < units; ++u)
    want.insert(want.end(), {"F+" + std::to_string(u), "F-" + std::to_string(u)});
  for (int u = units - 1; u >= 0; --u) {
    want.insert(want.end(), {"B+" + std::to_string(u), "B-" + std::to_string(u)});
  }
  EXPECT_EQ(hooks.calls, want);
  // Unit of each parameter: embedding 0, decoder layer l at l + 1, final norm and head last.
  EXPECT_EQ(model->UnitOf(*model->parameters().Find("embed_tokens")), 0);
  EXPECT_EQ(model->UnitOf(*model->parameters().Find("layers/2/attn/wq")), 3);
  EXPECT_EQ(model->UnitOf(*model->parameters().Find("final_norm")), units - 1);
  EXPECT_EQ(model->UnitOf(*model->parameters().Find("lm_head")), units - 1);
  model->set_layer_hooks(nullptr);
}

TEST(Zero3MpiTest, RefusesTiedEmbeddingsAndForwardOnlyModels) {
  MpiCommunicator& world = TestMpi().world();
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig tied = ZeroConfig();
  tied.tie_word_embeddings = true;
  auto tied_model = MakeModel(*backend, tied);
  auto z = Zero3::Create(*tied_model, world, Zero3Options{}, nullptr);
  EXPECT_EQ(z.status().code(), StatusCode::kFailedPrecondition);
  auto fwd = MoeModel::Create(*backend, ZeroConfig(), ModelOptions{.with_grad = false});
  ASSERT_TRUE(fwd.ok());
  auto z2 = Zero3::Create(**fwd, world, Zero3Options{}, nullptr);
  EXPECT_EQ(z2.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace sy
