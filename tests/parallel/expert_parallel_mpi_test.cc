// Expert parallelism over OpenMPI: an MoE layer whose experts are split over the ranks against the
// same layer computed in one process (LocalExpertCompute over every expert) on the same weights
// and the same global batch. Each rank holds a slice of the tokens. Checked: the forward output,
// the loss, the input gradient, the router (gate) gradient summed over ranks, and every expert's
// weight gradients on its owner. Cases: balanced and skewed routing, a rank with zero tokens, an
// expert with zero tokens, flat and hierarchical (2 emulated nodes) all-to-all, and expert data
// parallelism (ep_size = world / 2, expert gradients summed over the expert-DP group). Run with 2
// and 4 ranks.
//
// Tolerance: |ep - ref| <= 1e-5 * max(1, max |ref|) per tensor. float32 sums run in a different
// order (the weight gradients add the rows of several ranks in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "parallel/expert_parallel_compute.h"
#include "parallel/topology.h"
#include "runtime/backend/backend.h"
#include "runtime/model/host_transfer.h"
#include "runtime/model/moe_layer.h"
#include "runtime/model/parameter_store.h"
#include "tests/model/model_test_util.h"
#include "tests/parallel/mpi_test_env.h"

namespace sy {
namespace {

using testing::TestMpi;

constexpr float kRelTol = 1e-5f;
constexpr uint64_t kSeed = 1234;

ModelConfig EpConfig(int num_experts) {
  ModelConfig c = testing::TinyConfig();  // aux and z loss off
  c.num_layers = 1;
  c.num_experts = num_experts;
  // Dropless: the capacity is per rank under EP (from the rank's own tokens), so a dropping
  // layer would not match the one-process layer (see docs/parallel.md).
  c.capacity_factor = 0.0;
  return c;
}

std::unique_ptr<Backend> MakeCpu() { return testing::MakeBackend(Device::Cpu()); }

float MaxAbs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Max |a - b| / max(1, max |b|), and EXPECTs it within kRelTol.
float ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return INFINITY;
  float err = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::fabs(got[i] - want[i]));
  const float rel = err / std::max(1.0f, MaxAbs(want));
  EXPECT_LE(rel, kRelTol) << what << ": max abs error " << err;
  return rel;
}

// Skewed routing: expert 0 hot, expert 1 warm, expert num_experts - 3 never chosen. Writes the
// routing skew into the gate and the inputs (same on every rank and the reference).
void Skew(Backend& backend, ParameterStore& store, int num_experts, int64_t hidden,
          std::vector<float>& h) {
  Parameter* gate = store.Find("layers/0/moe/gate");
  SY_CHECK(gate != nullptr);
  auto values = DownloadF32(backend, gate->value);
  SY_CHECK(values.ok());
  std::vector<float> g = *values;
  for (int e = 0; e < num_experts; ++e) g[static_cast<size_t>(e) * hidden] = 0.0f;
  g[0] = 3.0f;                                                // expert 0: hot
  g[static_cast<size_t>(hidden)] = 1.5f;                      // expert 1: warm
  g[static_cast<size_t>(num_experts - 3) * hidden] = -20.0f;  // never in the top 2
  SY_CHECK_OK(CopyFromHost(backend, g, gate->value));
  for (size_t n = 0; n * hidden < h.size(); ++n) h[n * hidden] = 2.0f + 0.1f * float(n % 3);
}

struct LayerResult {
  std::vector<float> out, dh, gate_grad;
  double loss = 0.0;
  std::vector<DispatchPlan> plans;
};

// Forward + backward of one MoE layer on h [n, H] with loss = sum(out * dout).
LayerResult RunLayer(Backend& backend, MoeLayer& layer, const std::vector<float>& h,
                     const std::vector<float>& dout, int64_t n, int64_t hidden,
                     ParameterStore& store) {
  LayerResult r;
  auto ht = UploadF32(backend, h, Shape{n, hidden});
  SY_CHECK(ht.ok());
  auto out = Zeros(backend, Shape{n, hidden});
  auto stats = Zeros(backend, Shape{2});
  SY_CHECK(out.ok() && stats.ok());
  SY_CHECK_OK(layer.Forward(backend, *ht, Tensor(), *stats, *out));
  r.out = *DownloadF32(backend, *out);
  for (size_t i = 0; i < r.out.size(); ++i) r.loss += double(r.out[i]) * double(dout[i]);
  auto dt = UploadF32(backend, dout, Shape{n, hidden});
  auto dh = Zeros(backend, Shape{n, hidden});
  SY_CHECK(dt.ok() && dh.ok());
  SY_CHECK_OK(layer.Backward(backend, *dt, Tensor(), *dh));
  r.dh = *DownloadF32(backend, *dh);
  r.gate_grad = *DownloadF32(backend, store.Find("layers/0/moe/gate")->grad);
  layer.Release();
  return r;
}

struct EpCase {
  int ranks_per_node = 0;  // 0: real nodes (one), else emulated
  AllToAllAlgorithm algorithm = AllToAllAlgorithm::kFlat;
  bool skewed = false;
  bool empty_rank = false;  // the last rank holds no tokens
  int experts_per_rank = 2;
  int ep_size = 0;  // 0: the world; else expert data parallelism over world / ep_size groups
};

void CheckAgainstOneProcess(const EpCase& c) {
  MpiCommunicator& world = TestMpi().world();
  const int P = world.size();
  const int me = world.rank();
  const int ep_size = c.ep_size > 0 ? c.ep_size : P;
  const ModelConfig config = EpConfig(c.experts_per_rank * ep_size);
  const int64_t H = config.hidden_size;
  const int E = config.num_experts;

  // The global batch, identical on every rank; rank r holds tokens [offset[r], offset[r+1]).
  std::vector<int64_t> tokens(P);
  for (int r = 0; r < P; ++r) tokens[r] = 6 + 3 * r;
  if (c.empty_rank) tokens[P - 1] = 0;
  std::vector<int64_t> offset(P + 1, 0);
  std::partial_sum(tokens.begin(), tokens.end(), offset.begin() + 1);
  const int64_t N = offset[P];
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> h(static_cast<size_t>(N * H)), dout(h.size());
  for (float& x : h) x = normal(rng);
  for (float& x : dout) x = normal(rng);

  // The reference: one process, every expert here.
  std::unique_ptr<Backend> backend = MakeCpu();
  ParameterStore ref_store;
  auto ref_layer = MoeLayer::Create(*backend, ref_store, config, 0, DType::kF32, true);
  ASSERT_TRUE(ref_layer.ok()) << ref_layer.status().ToString();
  ASSERT_TRUE(ref_store.Initialize(*backend, kSeed, 0.5f).ok());
  std::vector<float> ref_h = h;
  if (c.skewed) Skew(*backend, ref_store, E, H, ref_h);
  ref_store.ZeroGrads(*backend);
  LayerResult ref = RunLayer(*backend, **ref_layer, ref_h, dout, N, H, ref_store);
  const DispatchPlan& ref_plan = (*ref_layer)->plan();
  if (c.skewed) {
    EXPECT_EQ(ref_plan.group_rows[E - 3], 0) << "expert " << E - 3 << " should get no tokens";
    EXPECT_GT(ref_plan.group_rows[0], N / 2) << "expert 0 should be hot";
  }

  // Expert parallel: this rank's experts only, this rank's tokens only.
  ExpertParallelGroups groups;
  Communicator* ep_comm = &world;
  if (ep_size != P) {
    auto made = MakeExpertParallelGroups(world, ep_size);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    groups = std::move(made).value();
    ASSERT_EQ(groups.ep->size(), ep_size);
    ASSERT_EQ(groups.expert_dp->size(), P / ep_size);
    ep_comm = groups.ep.get();
  }
  auto topology = Topology::Create(*ep_comm, TopologyOptions{.ranks_per_node = c.ranks_per_node});
  ASSERT_TRUE(topology.ok()) << topology.status().ToString();
  ParameterStore store;
  auto layer = MoeLayer::Create(*backend, store, config, 0, DType::kF32, true,
                                ExpertParallelCompute::Factory(**topology, config, c.algorithm));
  ASSERT_TRUE(layer.ok()) << layer.status().ToString();
  ASSERT_TRUE(store.Initialize(*backend, kSeed, 0.5f).ok());
  // Only this rank's experts are registered, under their global ids.
  const int el = E / ep_size;
  const int ep_rank = ep_comm->rank();
  int experts_here = 0;
  for (const Parameter& p : store) {
    if (!p.is_expert) continue;
    ++experts_here;
    EXPECT_GE(p.expert, ep_rank * el) << p.name;
    EXPECT_LT(p.expert, (ep_rank + 1) * el) << p.name;
    EXPECT_EQ(p.name.find("experts/layer0/expert" + std::to_string(p.expert) + "/"), 0u) << p.name;
  }
  EXPECT_EQ(experts_here, 3 * el);
  std::vector<float> my_h(ref_h.begin() + offset[me] * H, ref_h.begin() + offset[me + 1] * H);
  std::vector<float> my_dout(dout.begin() + offset[me] * H, dout.begin() + offset[me + 1] * H);
  if (c.skewed) {
    std::vector<float> unused;  // the gate skew; the inputs are already skewed in ref_h
    Skew(*backend, store, E, H, unused);
  }
  store.ZeroGrads(*backend);
  LayerResult ep = RunLayer(*backend, **layer, my_h, my_dout, tokens[me], H, store);
  if (groups.expert_dp != nullptr) {
    ASSERT_TRUE(AllReduceExpertGradients(*backend, store, *groups.expert_dp).ok());
  }

  std::vector<float> ref_out(ref.out.begin() + offset[me] * H,
                             ref.out.begin() + offset[me + 1] * H);
  std::vector<float> ref_dh(ref.dh.begin() + offset[me] * H, ref.dh.begin() + offset[me + 1] * H);
  float worst = 0.0f;
  worst = std::max(worst, ExpectClose(ep.out, ref_out, "forward output"));
  worst = std::max(worst, ExpectClose(ep.dh, ref_dh, "input gradient"));
  double loss = ep.loss;
  ASSERT_TRUE(world.AllReduce(&loss, &loss, 1, DType::kF64, Reduction::kSum).ok());
  EXPECT_NEAR(loss, ref.loss, kRelTol * std::max(1.0, std::fabs(ref.loss))) << "loss";
  std::vector<float> gate_grad = ep.gate_grad;
  ASSERT_TRUE(world.AllReduceInPlace<float>(gate_grad, Reduction::kSum).ok());
  worst = std::max(worst, ExpectClose(gate_grad, ref.gate_grad, "router gradient (summed)"));
  for (const Parameter& p : store) {
    if (!p.is_expert) continue;
    const Parameter* q = ref_store.Find(p.name);
    ASSERT_NE(q, nullptr) << p.name;
    worst = std::max(worst, ExpectClose(*DownloadF32(*backend, p.value),
                                        *DownloadF32(*backend, q->value), p.name + " value"));
    worst = std::max(worst, ExpectClose(*DownloadF32(*backend, p.grad),
                                        *DownloadF32(*backend, q->grad), p.name + " grad"));
  }
  float worst_all = worst;
  ASSERT_TRUE(world.AllReduce(&worst_all, &worst_all, 1, DType::kF32, Reduction::kMax).ok());
  if (me == 0) {
    std::printf(
        "[ ep ] %d ranks, ep_size %d, %d experts, %s, %s%s: N=%lld, max relative error %.3g\n", P,
        ep_size, E, std::string(AllToAllAlgorithmName(c.algorithm)).c_str(),
        c.skewed ? "skewed" : "balanced", c.empty_rank ? ", empty rank" : "",
        static_cast<long long>(N), static_cast<double>(worst_all));
  }
}

TEST(ExpertParallelMpiTest, FlatBalanced) { CheckAgainstOneProcess(EpCase{}); }

TEST(ExpertParallelMpiTest, FlatOneExpertPerRank) {
  CheckAgainstOneProcess(EpCase{.experts_per_rank = 1});
}

TEST(ExpertParallelMpiTest, FlatSkewedEmptyRankEmptyExpert) {
  CheckAgainstOneProcess(EpCase{.skewed = true, .empty_rank = true, .experts_per_rank = 3});
}

TEST(ExpertParallelMpiTest, HierarchicalTwoNodesSkewedEmptyRank) {
  const int P = TestMpi().world().size();
  CheckAgainstOneProcess(EpCase{.ranks_per_node = P / 2,
                                .algorithm = AllToAllAlgorithm::kHierarchical,
                                .skewed = true,
                                .empty_rank = true,
                                .experts_per_rank = 3});
}

TEST(ExpertParallelMpiTest, HierarchicalTwoNodesBalancedFourExpertsPerRank) {
  const int P = TestMpi().world().size();
  CheckAgainstOneProcess(EpCase{.ranks_per_node = P / 2,
                                .algorithm = AllToAllAlgorithm::kHierarchical,
                                .experts_per_rank = 4});
}

// world > ep_size: the experts' gradients are summed over the expert-data-parallel group.
TEST(ExpertParallelMpiTest, ExpertDataParallelSkewedEmptyRank) {
  const int P = TestMpi().world().size();
  CheckAgainstOneProcess(EpCase{.skewed = true,
                                .empty_rank = true,
                                .experts_per_rank = 6 / std::max(1, P / 2),
                                .ep_size = P / 2});
}

TEST(ExpertParallelMpiTest, ExpertDataParallelHierarchical) {
  const int P = TestMpi().world().size();
  if (P < 4) GTEST_SKIP() << "needs an EP group of 2 ranks (2 emulated nodes) in a world of 4";
  CheckAgainstOneProcess(EpCase{.ranks_per_node = 1,
                                .algorithm = AllToAllAlgorithm::kHierarchical,
                                .experts_per_rank = 2,
                                .ep_size = P / 2});
}

TEST(ExpertParallelMpiTest, GroupsMustDivide) {
  MpiCommunicator& world = TestMpi().world();
  auto groups = MakeExpertParallelGroups(world, world.size() + 1);
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().code(), StatusCode::kInvalidArgument);
}

TEST(ExpertParallelMpiTest, ExpertsMustDivide) {
  MpiCommunicator& world = TestMpi().world();
  auto topology = Topology::Create(world);
  ASSERT_TRUE(topology.ok());
  std::unique_ptr<Backend> backend = MakeCpu();
  ParameterStore store;
  auto ep = ExpertParallelCompute::Create(
      *backend, store, **topology,
      ExpertParallelOptions{.num_experts = 2 * world.size() + 1, .hidden = 4, .intermediate = 4}, 0,
      DType::kF32, true);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kInvalidArgument) << ep.status().ToString();
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace sy
