// Routing edge cases of the MoE layer, on cpu and sim: exact ties, dropped token-slots under a
// capacity factor, and experts that receive no tokens. Outputs are compared with an independent
// double-precision host implementation of the MoE layer written from the definitions (softmax,
// top-k with the lower expert first on ties, capacity in token order, SwiGLU experts, shared
// experts with a sigmoid gate).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/model/dispatch_plan.h"
#include "runtime/model/moe_layer.h"
#include "runtime/model/parameter_store.h"
#include "tests/model/model_test_util.h"

namespace sy {
namespace {

using testing::DeviceF32;
using testing::RandomNormal;
using testing::ToHost;

Tensor Alloc(Backend& backend, Shape shape) {
  auto t = backend.Allocate(DType::kF32, shape);
  SY_CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// out[n] = sum_e wgt[e] * SwiGLU_e(h[n]) with row-major weights as the parameter store holds them.
std::vector<double> SwigluRow(const std::vector<float>& wg, const std::vector<float>& wu,
                              const std::vector<float>& wd, int64_t hidden, int64_t inter,
                              const float* x) {
  std::vector<double> act(static_cast<size_t>(inter));
  for (int64_t i = 0; i < inter; ++i) {
    double g = 0, u = 0;
    for (int64_t j = 0; j < hidden; ++j) {
      g += static_cast<double>(wg[i * hidden + j]) * x[j];
      u += static_cast<double>(wu[i * hidden + j]) * x[j];
    }
    act[static_cast<size_t>(i)] = Silu(g) * u;
  }
  std::vector<double> y(static_cast<size_t>(hidden));
  for (int64_t j = 0; j < hidden; ++j) {
    double s = 0;
    for (int64_t i = 0; i < inter; ++i) s += static_cast<double>(wd[j * inter + i]) * act[i];
    y[static_cast<size_t>(j)] = s;
  }
  return y;
}

struct HostMoeResult {
  std::vector<double> out;               // [N, H]
  std::vector<std::vector<int>> chosen;  // per token, the experts in descending order
  std::vector<std::vector<bool>> kept;   // per token and choice
};

// The MoE layer from its definition, in double precision, reading the parameters by name.
HostMoeResult HostMoe(Backend& backend, const ParameterStore& store, const ModelConfig& c,
                      int layer, const std::vector<float>& h, int64_t n) {
  const int64_t hid = c.hidden_size, inter = c.moe_intermediate_size;
  const int e_count = c.num_experts, k = c.top_k;
  auto param = [&](const std::string& name) {
    const Parameter* p = store.Find(name);
    SY_CHECK(p != nullptr) << name;
    return ToHost(backend, p->value);
  };
  const std::string base = "layers/" + std::to_string(layer) + "/moe/";
  const std::vector<float> gate = param(base + "gate");
  HostMoeResult r;
  r.out.assign(static_cast<size_t>(n * hid), 0.0);
  r.chosen.resize(static_cast<size_t>(n));
  r.kept.resize(static_cast<size_t>(n));
  const int64_t capacity =
      c.capacity_factor > 0
          ? static_cast<int64_t>(std::ceil(c.capacity_factor * n * k / e_count - 1e-9))
          : -1;
  std::vector<int64_t> load(static_cast<size_t>(e_count), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> logit(static_cast<size_t>(e_count));
    for (int e = 0; e < e_count; ++e) {
      double s = 0;
      for (int64_t j = 0; j < hid; ++j)
        s += static_cast<double>(gate[e * hid + j]) * h[t * hid + j];
      logit[static_cast<size_t>(e)] = s;
    }
    const double mx = *std::max_element(logit.begin(), logit.end());
    double z = 0;
    for (double l : logit) z += std::exp(l - mx);
    std::vector<int> order(static_cast<size_t>(e_count));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return logit[static_cast<size_t>(a)] > logit[static_cast<size_t>(b)];
    });
    order.resize(static_cast<size_t>(k));
    std::vector<double> w(static_cast<size_t>(k));
    double wsum = 0;
    for (int j = 0; j < k; ++j) {
      w[static_cast<size_t>(j)] =
          std::exp(logit[static_cast<size_t>(order[static_cast<size_t>(j)])] - mx) / z;
      wsum += w[static_cast<size_t>(j)];
    }
    if (c.norm_topk_prob) {
      for (double& x : w) x /= wsum;
    }
    r.chosen[static_cast<size_t>(t)] = order;
    for (int choice = 0; choice < k; ++choice) {
      const int e = order[static_cast<size_t>(choice)];
      const bool keep = capacity < 0 || load[static_cast<size_t>(e)] < capacity;
      r.kept[static_cast<size_t>(t)].push_back(keep);
      if (!keep) continue;
      ++load[static_cast<size_t>(e)];
      const std::string ex =
          "experts/layer" + std::to_string(layer) + "/expert" + std::to_string(e) + "/";
      std::vector<double> y = SwigluRow(param(ex + "w_gate"), param(ex + "w_up"),
                                        param(ex + "w_down"), hid, inter, &h[t * hid]);
      for (int64_t j = 0; j < hid; ++j) {
        r.out[t * hid + j] += w[static_cast<size_t>(choice)] * y[static_cast<size_t>(j)];
      }
    }
  }
  if (c.num_shared_experts > 0) {
    const std::string s = base + "shared_experts/";
    const std::vector<float> wg = param(s + "w_gate"), wu = param(s + "w_up"),
                             wd = param(s + "w_down");
    std::vector<float> sg;
    if (c.shared_expert_gate) sg = param(base + "shared_expert_gate");
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> y = SwigluRow(wg, wu, wd, hid, c.shared_intermediate(), &h[t * hid]);
      double scale = 1.0;
      if (c.shared_expert_gate) {
        double a = 0;
        for (int64_t j = 0; j < hid; ++j) a += static_cast<double>(sg[j]) * h[t * hid + j];
        scale = 1.0 / (1.0 + std::exp(-a));
      }
      for (int64_t j = 0; j < hid; ++j) r.out[t * hid + j] += scale * y[j];
    }
  }
  return r;
}

ModelConfig LayerConfig(int experts, int top_k, bool renorm, double capacity) {
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 1;
  c.num_experts = experts;
  c.top_k = top_k;
  c.norm_topk_prob = renorm;
  c.capacity_factor = capacity;
  return c;
}

class MoeRoutingTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { backend_ = testing::MakeBackend(GetParam()); }

  void Build(const ModelConfig& config, uint64_t seed) {
    config_ = config;
    ASSERT_TRUE(config_.Validate().ok()) << config_.Validate().ToString();
    auto moe = MoeLayer::Create(*backend_, *store_, config_, 0, DType::kF32, true);
    ASSERT_TRUE(moe.ok()) << moe.status().ToString();
    layer_ = std::move(moe).value();
    ASSERT_TRUE(store_->Initialize(*backend_, seed, 0.4f).ok());
  }
  void FillParam(const std::string& name, float value) {
    const Parameter* p = store_->Find(name);
    ASSERT_NE(p, nullptr) << name;
    backend_->Fill(p->value, value);
  }
  // Runs forward and backward (dout = 1 everywhere); returns the output.
  std::vector<float> Run(const std::vector<float>& h, int64_t n) {
    h_dev_ = DeviceF32(*backend_, h, Shape{n, config_.hidden_size});
    Tensor stats = Alloc(*backend_, Shape{2});
    Tensor out = Alloc(*backend_, Shape{n, config_.hidden_size});
    SY_CHECK_OK(layer_->Forward(*backend_, h_dev_, Tensor(), stats, out));
    std::vector<float> result = ToHost(*backend_, out);
    store_->ZeroGrads(*backend_);
    Tensor dout = Alloc(*backend_, Shape{n, config_.hidden_size});
    backend_->Fill(dout, 1.0f);
    dh_ = Alloc(*backend_, Shape{n, config_.hidden_size});
    SY_CHECK_OK(layer_->Backward(*backend_, dout, Tensor(), dh_));
    return result;
  }
  void ExpectMatchesHost(const std::vector<float>& out, const HostMoeResult& ref) {
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(ref.out[i]));
      max_err = std::max(max_err, std::abs(out[i] - ref.out[i]));
    }
    EXPECT_LE(max_err, 1e-5 * std::max(1.0, max_ref)) << "max |out - host| " << max_err;
  }
  // Expert e's gradients are all exactly zero (and not NaN).
  void ExpectExpertGradZero(int e, bool zero) {
    for (const char* w : {"w_gate", "w_up", "w_down"}) {
      const std::string name = "experts/layer0/expert" + std::to_string(e) + "/" + w;
      std::vector<float> g = ToHost(*backend_, store_->Find(name)->grad);
      bool all_zero = std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; });
      bool finite = std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); });
      EXPECT_TRUE(finite) << name;
      EXPECT_EQ(all_zero, zero) << name;
    }
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ParameterStore> store_ = std::make_unique<ParameterStore>();
  ModelConfig config_;
  std::unique_ptr<MoeLayer> layer_;
  Tensor h_dev_, dh_;
};

// All router logits equal: every token goes to experts 0..k-1, in that order; the others get
// nothing, and exactly zero gradient.
TEST_P(MoeRoutingTest, FullTiesPickLowestExperts) {
  for (bool renorm : {true, false}) {
    SCOPED_TRACE(renorm ? "renorm" : "no renorm");
    store_ = std::make_unique<ParameterStore>();
    Build(LayerConfig(/*experts=*/6, /*top_k=*/2, renorm, /*capacity=*/0.0), 3);
    FillParam("layers/0/moe/gate", 0.0f);
    const int64_t n = 5;
    std::vector<float> h = RandomNormal(n * 16, 4, 1.0f);
    std::vector<float> out = Run(h, n);
    const DispatchPlan& plan = layer_->plan();
    EXPECT_EQ(plan.routed, (std::vector<int64_t>{n, n, 0, 0, 0, 0}));
    EXPECT_EQ(plan.group_rows, (std::vector<int64_t>{n, n, 0, 0, 0, 0}));
    for (int64_t t = 0; t < n; ++t) {
      EXPECT_EQ(plan.row_slot[static_cast<size_t>(t)], 2 * t) << "expert 0 rows in token order";
      EXPECT_EQ(plan.row_slot[static_cast<size_t>(n + t)], 2 * t + 1);
    }
    HostMoeResult ref = HostMoe(*backend_, *store_, config_, 0, h, n);
    ExpectMatchesHost(out, ref);
    for (int e = 0; e < 6; ++e) ExpectExpertGradZero(e, /*zero=*/e >= 2);
  }
}

// Partial ties: logits [1, 3, 3, 0, 3] pick experts 1 and 2 (lowest index among the equal ones).
TEST_P(MoeRoutingTest, PartialTiesKeepLowerIndexFirst) {
  Build(LayerConfig(5, 2, /*renorm=*/false, 0.0), 5);
  // logits[t, e] = h[t, 0] * gate[e, 0] with h[t] = e_0.
  std::vector<float> gate(5 * 16, 0.0f);
  const float logits[5] = {1, 3, 3, 0, 3};
  for (int e = 0; e < 5; ++e) gate[static_cast<size_t>(e * 16)] = logits[e];
  testing::FromHost(*backend_, gate, store_->Find("layers/0/moe/gate")->value);
  const int64_t n = 3;
  std::vector<float> h(n * 16, 0.0f);
  for (int64_t t = 0; t < n; ++t) h[static_cast<size_t>(t * 16)] = 1.0f;
  std::vector<float> out = Run(h, n);
  const DispatchPlan& plan = layer_->plan();
  EXPECT_EQ(plan.routed, (std::vector<int64_t>{0, n, n, 0, 0}));
  HostMoeResult ref = HostMoe(*backend_, *store_, config_, 0, h, n);
  for (int64_t t = 0; t < n; ++t) {
    EXPECT_EQ(ref.chosen[static_cast<size_t>(t)], (std::vector<int>{1, 2}));
  }
  ExpectMatchesHost(out, ref);
  for (int e = 0; e < 5; ++e) ExpectExpertGradZero(e, /*zero=*/e != 1 && e != 2);
}

// Capacity: with all tokens tied onto expert 0 (top-1), capacity ceil(1.0 * 8 * 1 / 4) = 2 keeps
// tokens 0 and 1 and drops tokens 2..7, which then output exactly zero and pass exactly zero
// gradient back (no shared expert, no aux loss).
TEST_P(MoeRoutingTest, CapacityDropsInTokenOrder) {
  Build(LayerConfig(4, 1, /*renorm=*/true, /*capacity=*/1.0), 6);
  FillParam("layers/0/moe/gate", 0.0f);
  const int64_t n = 8;
  std::vector<float> h = RandomNormal(n * 16, 7, 1.0f);
  std::vector<float> out = Run(h, n);
  const DispatchPlan& plan = layer_->plan();
  EXPECT_EQ(plan.capacity, 2);
  EXPECT_EQ(plan.routed, (std::vector<int64_t>{n, 0, 0, 0}));
  EXPECT_EQ(plan.group_rows, (std::vector<int64_t>{2, 0, 0, 0}));
  EXPECT_EQ(plan.row_token, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(plan.num_dropped(), 6);
  std::vector<float> dh = ToHost(*backend_, dh_);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < 16; ++j) {
      const size_t i = static_cast<size_t>(t * 16 + j);
      if (t >= 2) {
        EXPECT_EQ(out[i], 0.0f) << "dropped token " << t;
        EXPECT_EQ(dh[i], 0.0f) << "dropped token " << t;
      }
    }
    if (t < 2) {
      EXPECT_NE(out[static_cast<size_t>(t * 16)], 0.0f) << "kept token " << t;
    }
  }
  HostMoeResult ref = HostMoe(*backend_, *store_, config_, 0, h, n);
  ExpectMatchesHost(out, ref);
  for (int e = 0; e < 4; ++e) ExpectExpertGradZero(e, /*zero=*/e != 0);
}

// Capacity with real (untied) routing and a shared expert with its gate, top-2: the layer matches
// the host definition, including which slots were dropped.
TEST_P(MoeRoutingTest, CapacityWithRandomRoutingMatchesHost) {
  ModelConfig c = LayerConfig(4, 2, /*renorm=*/false, /*capacity=*/0.5);
  c.num_shared_experts = 1;
  c.shared_expert_intermediate_size = 8;
  c.shared_expert_gate = true;
  Build(c, 8);
  const int64_t n = 12;
  std::vector<float> h = RandomNormal(n * 16, 9, 1.0f);
  std::vector<float> out = Run(h, n);
  HostMoeResult ref = HostMoe(*backend_, *store_, config_, 0, h, n);
  ExpectMatchesHost(out, ref);
  const DispatchPlan& plan = layer_->plan();
  EXPECT_EQ(plan.capacity, 3);
  int64_t ref_dropped = 0;
  for (const auto& kept : ref.kept) ref_dropped += std::count(kept.begin(), kept.end(), false);
  EXPECT_EQ(plan.num_dropped(), ref_dropped);
  EXPECT_GT(ref_dropped, 0);
}

// More experts than token-slots: most experts receive no token; the layer runs, matches the
// host, and those experts get exactly zero gradient while the used ones get some.
TEST_P(MoeRoutingTest, ExpertsWithZeroTokens) {
  Build(LayerConfig(8, 1, /*renorm=*/false, 0.0), 10);
  const int64_t n = 3;
  std::vector<float> h = RandomNormal(n * 16, 11, 1.0f);
  std::vector<float> out = Run(h, n);
  HostMoeResult ref = HostMoe(*backend_, *store_, config_, 0, h, n);
  ExpectMatchesHost(out, ref);
  const DispatchPlan& plan = layer_->plan();
  int empty = 0;
  for (int e = 0; e < 8; ++e) {
    const bool unused = plan.group_rows[static_cast<size_t>(e)] == 0;
    empty += unused ? 1 : 0;
    ExpectExpertGradZero(e, unused);
  }
  EXPECT_GE(empty, 5);
}

INSTANTIATE_TEST_SUITE_P(Devices, MoeRoutingTest, ::testing::Values(Device::Cpu(), Device::Sim()),
                         [](const auto& info) { return info.param.ToString(); });

}  // namespace
}  // namespace sy
