// Finite-difference gradient checks of every model layer on the cpu backend, in isolation, with
// the loss L = <out, R> for a fixed random R (so dout = R). The method and its tolerances are
// explained in tests/model/model_test_util.h.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "runtime/model/attention_block.h"
#include "runtime/model/decoder_layer.h"
#include "runtime/model/host_transfer.h"
#include "runtime/model/linear.h"
#include "runtime/model/moe_layer.h"
#include "runtime/model/parameter_store.h"
#include "runtime/model/rms_norm_layer.h"
#include "runtime/model/router.h"
#include "runtime/model/shared_experts.h"
#include "runtime/model/swiglu_mlp.h"
#include "tests/model/model_test_util.h"

namespace sy {
namespace {

using testing::CheckDirectionalGradient;
using testing::DeviceF32;
using testing::DeviceI32;
using testing::Dot;
using testing::FdOptions;
using testing::FdResult;
using testing::RandomNormal;
using testing::ToHost;

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    ::sy::Status s_ = (expr);                               \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)

Tensor Alloc(Backend& backend, Shape shape) {
  auto t = backend.Allocate(DType::kF32, shape);
  SY_CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// A layer under test, as closures.
struct Harness {
  Shape in_shape;
  Shape out_shape;
  // x -> out; the loss adds extra() (e.g. router losses) to <out, R>.
  std::function<Status(const Tensor& x, const Tensor& out)> forward;
  // dout -> dx (overwritten).
  std::function<Status(const Tensor& dout, const Tensor& dx)> backward;
  std::function<double()> extra;  // optional
  testing::RoutingFn routing;     // optional
};

struct CheckTotals {
  int checked = 0;
  int skipped = 0;
};

CheckTotals CheckLayer(Backend& backend, ParameterStore& store, const Harness& h, uint64_t seed = 1,
                       float x_scale = 1.0f) {
  Tensor x = DeviceF32(backend, RandomNormal(h.in_shape.numel(), seed, x_scale), h.in_shape);
  const std::vector<float> r = RandomNormal(h.out_shape.numel(), seed + 100, 1.0f);
  Tensor r_dev = DeviceF32(backend, r, h.out_shape);

  store.ZeroGrads(backend);
  Tensor out = Alloc(backend, h.out_shape);
  SY_CHECK_OK(h.forward(x, out));
  Tensor dx = Alloc(backend, h.in_shape);
  SY_CHECK_OK(h.backward(r_dev, dx));

  testing::LossFn loss = [&]() {
    Tensor o = Alloc(backend, h.out_shape);
    SY_CHECK_OK(h.forward(x, o));
    return Dot(ToHost(backend, o), r) + (h.extra ? h.extra() : 0.0);
  };
  CheckTotals totals;
  auto check = [&](const std::string& name, const Tensor& value, const std::vector<float>& grad) {
    FdResult res = CheckDirectionalGradient(backend, value, grad, loss, h.routing, FdOptions{});
    EXPECT_EQ(res.failed, 0) << name << "\n" << res.report;
    if (std::getenv("SY_FD_VERBOSE") != nullptr)
      std::printf("%s\n%s", name.c_str(), res.report.c_str());
    totals.checked += res.checked;
    totals.skipped += res.skipped;
  };
  check("input", x, ToHost(backend, dx));
  for (const Parameter& p : store) check(p.name, p.value, ToHost(backend, p.grad));
  EXPECT_GT(totals.checked, 2 * totals.skipped) << "too many directions changed the routing";
  return totals;
}

class LayerGradTest : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = testing::MakeBackend(Device::Cpu()); }
  void Init(uint64_t seed, float stddev) {
    SY_CHECK_OK(store_.Initialize(*backend_, seed, stddev));
  }
  // Gives norm weights and biases non-trivial values, so their gradients are tested at a
  // generic point rather than at 1 and 0.
  void Jitter(uint64_t seed) {
    for (Parameter& p : store_) {
      if (p.init == ParamInit::kNormal) continue;
      std::vector<float> v = ToHost(*backend_, p.value);
      std::vector<float> n = RandomNormal(v.size(), seed++, 0.2f);
      for (size_t i = 0; i < v.size(); ++i) v[i] += n[i];
      testing::FromHost(*backend_, v, p.value);
    }
  }

  std::unique_ptr<Backend> backend_;
  ParameterStore store_;
};

TEST_F(LayerGradTest, RmsNorm) {
  auto norm = RmsNormLayer::Create(*backend_, store_, "norm", 16, DType::kF32, true, 0, 1e-6f);
  ASSERT_TRUE(norm.ok());
  Init(1, 0.5f);
  Jitter(2);
  Harness h{
      Shape{6, 16},
      Shape{6, 16},
      [&](const Tensor& x, const Tensor& out) { return norm->Forward(*backend_, x, out); },
      [&](const Tensor& dout, const Tensor& dx) { return norm->Backward(*backend_, dout, dx); },
      nullptr,
      nullptr};
  CheckLayer(*backend_, store_, h);
}

TEST_F(LayerGradTest, LinearWithBias) {
  auto lin = Linear::Create(*backend_, store_, "w", "b", 16, 10, DType::kF32, true, 0);
  ASSERT_TRUE(lin.ok());
  Init(3, 0.5f);
  Jitter(4);
  Tensor saved_x;
  Harness h{Shape{5, 16},
            Shape{5, 10},
            [&](const Tensor& x, const Tensor& out) {
              saved_x = x;
              return lin->Forward(*backend_, x, out);
            },
            [&](const Tensor& dout, const Tensor& dx) {
              return lin->Backward(*backend_, saved_x, dout, dx, 0.0f);
            },
            nullptr,
            nullptr};
  CheckLayer(*backend_, store_, h);
}

struct AttentionCase {
  const char* name;
  int heads, kv_heads;
  bool qk_norm, per_head, bias;
};

class AttentionGradTest : public LayerGradTest,
                          public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(AttentionGradTest, Block) {
  const AttentionCase& c = GetParam();
  ModelConfig config = testing::TinyConfig();
  config.num_heads = c.heads;
  config.num_kv_heads = c.kv_heads;
  config.qk_norm = c.qk_norm;
  config.qk_norm_per_head = c.per_head;
  config.attention_bias = c.bias;
  config.attention_out_bias = c.bias;  // q, k, v and o, as transformers' attention_bias
  config.rope_theta = 100.0;           // large rotations at these short positions
  auto attn = AttentionBlock::Create(*backend_, store_, config, 0, DType::kF32, true);
  ASSERT_TRUE(attn.ok()) << attn.status().ToString();
  Init(5, 0.4f);
  Jitter(6);
  TokenBatch batch;
  batch.batch = 2;
  batch.seq_len = 3;
  batch.positions = DeviceI32(*backend_, {0, 1, 2, 0, 1, 2}, Shape{6});
  Harness h{
      Shape{6, 16},
      Shape{6, 16},
      [&](const Tensor& x, const Tensor& out) { return attn->Forward(*backend_, batch, x, out); },
      [&](const Tensor& dout, const Tensor& dx) {
        return attn->Backward(*backend_, batch, dout, dx);
      },
      nullptr,
      nullptr};
  CheckLayer(*backend_, store_, h);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, AttentionGradTest,
    ::testing::Values(AttentionCase{"mha", 4, 4, false, true, false},
                      AttentionCase{"gqa_qknorm_head_bias", 4, 2, true, true, true},
                      AttentionCase{"mqa_qknorm_full", 4, 1, true, false, false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(LayerGradTest, SwigluMlp) {
  auto mlp = SwigluMlp::Create(*backend_, store_, "mlp/", 16, 24, DType::kF32, true, 0);
  ASSERT_TRUE(mlp.ok());
  Init(7, 0.4f);
  Harness h{Shape{5, 16},
            Shape{5, 16},
            [&](const Tensor& x, const Tensor& out) { return mlp->Forward(*backend_, x, out); },
            [&](const Tensor& dout, const Tensor& dx) {
              return mlp->Backward(*backend_, dout, dx, 0.0f);
            },
            nullptr,
            nullptr};
  CheckLayer(*backend_, store_, h);
}

struct SharedCase {
  const char* name;
  bool gate;
};

class SharedExpertsGradTest : public LayerGradTest,
                              public ::testing::WithParamInterface<SharedCase> {};

TEST_P(SharedExpertsGradTest, Block) {
  ModelConfig config = testing::TinyConfig();
  config.num_shared_experts = 2;
  config.shared_expert_intermediate_size = 6;
  config.shared_expert_gate = GetParam().gate;
  auto shared = SharedExperts::Create(*backend_, store_, config, 0, DType::kF32, true);
  ASSERT_TRUE(shared.ok());
  Init(8, 0.4f);
  Harness h{Shape{5, 16},
            Shape{5, 16},
            [&](const Tensor& x, const Tensor& out) {
              backend_->Fill(out, 0.0f);
              return shared->Forward(*backend_, x, out);
            },
            [&](const Tensor& dout, const Tensor& dx) {
              backend_->Fill(dx, 0.0f);
              return shared->Backward(*backend_, dout, dx);
            },
            nullptr,
            nullptr};
  CheckLayer(*backend_, store_, h);
}

INSTANTIATE_TEST_SUITE_P(Variants, SharedExpertsGradTest,
                         ::testing::Values(SharedCase{"plain", false}, SharedCase{"gated", true}),
                         [](const auto& info) { return std::string(info.param.name); });

struct RouterCase {
  const char* name;
  int top_k;
  bool renorm;
  float aux, z;
};

class RouterGradTest : public LayerGradTest, public ::testing::WithParamInterface<RouterCase> {};

// The router alone: L = <weights, R> + aux_coef * aux + z_coef * z, input = the logits.
TEST_P(RouterGradTest, LogitsGradient) {
  const RouterCase& c = GetParam();
  const int e = 6;
  const int64_t n = 7;
  Router router(RouterOptions{.num_experts = e,
                              .top_k = c.top_k,
                              .norm_topk_prob = c.renorm,
                              .aux_loss_coef = c.aux,
                              .z_loss_coef = c.z});
  Tensor stats = Alloc(*backend_, Shape{2});
  Harness h{Shape{n, e},
            Shape{n, c.top_k},
            [&](const Tensor& logits, const Tensor& out) {
              SY_RETURN_IF_ERROR(router.Forward(*backend_, logits, stats));
              backend_->CopyAsync(router.weights(), out, backend_->compute_stream());
              return Status::Ok();
            },
            [&](const Tensor& dout, const Tensor& dlogits) {
              return router.Backward(*backend_, dout, dlogits);
            },
            [&]() {
              std::vector<float> s = ToHost(*backend_, stats);
              return static_cast<double>(c.aux) * s[0] + static_cast<double>(c.z) * s[1];
            },
            [&]() { return router.slot_experts(); }};
  CheckLayer(*backend_, store_, h, /*seed=*/11, /*x_scale=*/2.0f);
}

INSTANTIATE_TEST_SUITE_P(Variants, RouterGradTest,
                         ::testing::Values(RouterCase{"top1_renorm", 1, true, 0.0f, 0.0f},
                                           RouterCase{"top1_plain_aux", 1, false, 0.5f, 0.0f},
                                           RouterCase{"top2_renorm_aux_z", 2, true, 0.5f, 0.2f},
                                           RouterCase{"top3_plain_aux_z", 3, false, 0.3f, 0.1f},
                                           RouterCase{"top2_z_only", 2, false, 0.0f, 0.3f}),
                         [](const auto& info) { return std::string(info.param.name); });

// Without stats (inference) the router routes exactly as with them: the same experts and the same
// weights, for every variant; it only skips the aux and z statistics.
TEST_P(RouterGradTest, WithoutStatsRoutesTheSame) {
  const RouterCase& c = GetParam();
  const int e = 6;
  const int64_t n = 7;
  const RouterOptions options{.num_experts = e,
                              .top_k = c.top_k,
                              .norm_topk_prob = c.renorm,
                              .aux_loss_coef = c.aux,
                              .z_loss_coef = c.z};
  const Tensor logits = DeviceF32(*backend_, RandomNormal(n * e, 3, 2.0f), Shape{n, e});
  Router training(options), inference(options);
  ASSERT_TRUE(training.Forward(*backend_, logits, Alloc(*backend_, Shape{2})).ok());
  ASSERT_TRUE(inference.Forward(*backend_, logits, Tensor()).ok());
  EXPECT_EQ(inference.slot_experts(), training.slot_experts());
  EXPECT_EQ(ToHost(*backend_, inference.weights()), ToHost(*backend_, training.weights()));
}

struct MoeCase {
  const char* name;
  int top_k;
  bool renorm;
  double capacity;
  int shared;
  bool shared_gate;
};

class MoeLayerGradTest : public LayerGradTest, public ::testing::WithParamInterface<MoeCase> {};

TEST_P(MoeLayerGradTest, Layer) {
  const MoeCase& c = GetParam();
  ModelConfig config = testing::TinyConfig();
  config.num_layers = 1;
  config.num_experts = 6;
  config.top_k = c.top_k;
  config.norm_topk_prob = c.renorm;
  config.capacity_factor = c.capacity;
  config.num_shared_experts = c.shared;
  config.shared_expert_intermediate_size = 8;
  config.shared_expert_gate = c.shared_gate;
  config.router_aux_loss_coef = 0.1;
  config.router_z_loss_coef = 0.05;
  ASSERT_OK(config.Validate());
  auto moe = MoeLayer::Create(*backend_, store_, config, 0, DType::kF32, true);
  ASSERT_TRUE(moe.ok()) << moe.status().ToString();
  MoeLayer& layer = **moe;
  Init(12, 0.4f);
  Tensor stats = Alloc(*backend_, Shape{2});
  Harness h{Shape{9, 16},
            Shape{9, 16},
            [&](const Tensor& x, const Tensor& out) {
              return layer.Forward(*backend_, x, Tensor(), stats, out);
            },
            [&](const Tensor& dout, const Tensor& dx) {
              return layer.Backward(*backend_, dout, Tensor(), dx);
            },
            [&]() {
              std::vector<float> s = ToHost(*backend_, stats);
              return config.router_aux_loss_coef * s[0] + config.router_z_loss_coef * s[1];
            },
            [&]() {
              const DispatchPlan& p = layer.plan();
              std::vector<int32_t> f = p.row_slot;
              for (int64_t g : p.routed) f.push_back(static_cast<int32_t>(g));
              return f;
            }};
  CheckLayer(*backend_, store_, h, 13);
  if (c.capacity > 0.0) {
    EXPECT_GT(layer.plan().num_dropped(), 0) << "the capacity case should drop slots";
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeLayerGradTest,
                         ::testing::Values(MoeCase{"top1", 1, true, 0.0, 0, false},
                                           MoeCase{"top2_renorm", 2, true, 0.0, 0, false},
                                           MoeCase{"top2_plain_shared", 2, false, 0.0, 1, false},
                                           MoeCase{"top2_shared_gate", 2, true, 0.0, 2, true},
                                           MoeCase{"top2_capacity", 2, false, 0.75, 0, false},
                                           MoeCase{"top1_capacity_shared_gate", 1, true, 1.0, 1,
                                                   true}),
                         [](const auto& info) { return std::string(info.param.name); });

// A pre-gated MoE layer in the middle of the stack: routed by given logits (from the previous
// pre-gate) and computing the pre-gate logits of the next layer.
// L = <out, R> + <pregate_logits, R2> + aux/z terms; checked wrt h, the routed logits and every
// parameter.
TEST_F(LayerGradTest, PregatedMoeLayer) {
  ModelConfig config = testing::TinyConfig();
  config.num_layers = 3;
  config.num_experts = 6;
  config.top_k = 2;
  config.pregate = true;
  config.router_aux_loss_coef = 0.1;
  config.router_z_loss_coef = 0.05;
  auto moe = MoeLayer::Create(*backend_, store_, config, 1, DType::kF32, true);
  ASSERT_TRUE(moe.ok()) << moe.status().ToString();
  MoeLayer& layer = **moe;
  ASSERT_FALSE(layer.has_gate());
  ASSERT_TRUE(layer.has_pregate());
  EXPECT_EQ(store_.Find("layers/1/moe/gate"), nullptr);
  EXPECT_NE(store_.Find("layers/1/moe/pregate"), nullptr);
  Init(14, 0.4f);

  const int64_t n = 9;
  Tensor routed = DeviceF32(*backend_, RandomNormal(n * 6, 15, 1.5f), Shape{n, 6});
  Tensor h = DeviceF32(*backend_, RandomNormal(n * 16, 16, 1.0f), Shape{n, 16});
  const std::vector<float> r = RandomNormal(n * 16, 17, 1.0f);
  const std::vector<float> r2 = RandomNormal(n * 6, 18, 1.0f);
  Tensor stats = Alloc(*backend_, Shape{2});
  auto forward = [&]() {
    Tensor out = Alloc(*backend_, Shape{n, 16});
    SY_CHECK_OK(layer.Forward(*backend_, h, routed, stats, out));
    std::vector<float> s = ToHost(*backend_, stats);
    return Dot(ToHost(*backend_, out), r) + Dot(ToHost(*backend_, layer.pregate_logits()), r2) +
           config.router_aux_loss_coef * s[0] + config.router_z_loss_coef * s[1];
  };
  store_.ZeroGrads(*backend_);
  forward();
  Tensor dh = Alloc(*backend_, Shape{n, 16});
  ASSERT_OK(layer.Backward(*backend_, DeviceF32(*backend_, r, Shape{n, 16}),
                           DeviceF32(*backend_, r2, Shape{n, 6}), dh));
  const std::vector<float> d_routed = ToHost(*backend_, layer.routed_logits_grad());
  const std::vector<float> d_h = ToHost(*backend_, dh);
  auto routing = [&]() { return layer.plan().row_slot; };
  auto expect_ok = [&](const char* name, const Tensor& value, const std::vector<float>& grad) {
    FdResult res = CheckDirectionalGradient(*backend_, value, grad, forward, routing);
    EXPECT_EQ(res.failed, 0) << name << "\n" << res.report;
    EXPECT_GT(res.checked, 0) << name;
  };
  expect_ok("h", h, d_h);
  expect_ok("routed logits", routed, d_routed);
  for (const Parameter& p : store_) expect_ok(p.name.c_str(), p.value, ToHost(*backend_, p.grad));
}

struct DecoderCase {
  const char* name;
  bool moe;
  bool recompute;
};

class DecoderLayerGradTest : public LayerGradTest,
                             public ::testing::WithParamInterface<DecoderCase> {};

TEST_P(DecoderLayerGradTest, Layer) {
  const DecoderCase& c = GetParam();
  ModelConfig config = testing::TinyConfig();
  config.num_layers = 1;
  config.first_k_dense = c.moe ? 0 : 1;
  config.num_kv_heads = 2;
  config.qk_norm = true;
  config.recompute = c.recompute;
  config.num_shared_experts = 1;
  config.router_aux_loss_coef = 0.1;
  ASSERT_OK(config.Validate());
  auto dec = DecoderLayer::Create(*backend_, store_, config, 0, DType::kF32, true);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  DecoderLayer& layer = **dec;
  ASSERT_EQ(layer.moe() != nullptr, c.moe);
  Init(19, 0.4f);
  Jitter(20);
  TokenBatch batch;
  batch.batch = 2;
  batch.seq_len = 4;
  batch.positions = DeviceI32(*backend_, {0, 1, 2, 3, 0, 1, 2, 3}, Shape{8});
  Tensor stats = Alloc(*backend_, Shape{2});
  Harness h{Shape{8, 16},
            Shape{8, 16},
            [&](const Tensor& x, const Tensor& out) {
              return layer.Forward(*backend_, batch, x, Tensor(), stats, out);
            },
            [&](const Tensor& dout, const Tensor& dx) {
              return layer.Backward(*backend_, batch, dout, Tensor(), dx);
            },
            [&]() {
              if (!c.moe) return 0.0;
              return config.router_aux_loss_coef * ToHost(*backend_, stats)[0];
            },
            [&]() { return c.moe ? layer.moe()->plan().row_slot : std::vector<int32_t>(); }};
  CheckLayer(*backend_, store_, h, 21);
}

INSTANTIATE_TEST_SUITE_P(Variants, DecoderLayerGradTest,
                         ::testing::Values(DecoderCase{"dense", false, false},
                                           DecoderCase{"moe", true, false},
                                           DecoderCase{"moe_recompute", true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// The check itself must reject wrong gradients: 10% too large, or one block with the wrong sign.
TEST_F(LayerGradTest, FdCanaryRejectsWrongGradients) {
  auto mlp = SwigluMlp::Create(*backend_, store_, "mlp/", 16, 24, DType::kF32, true, 0);
  ASSERT_TRUE(mlp.ok());
  Init(22, 0.4f);
  Tensor x = DeviceF32(*backend_, RandomNormal(5 * 16, 23, 1.0f), Shape{5, 16});
  const std::vector<float> r = RandomNormal(5 * 16, 24, 1.0f);
  store_.ZeroGrads(*backend_);
  Tensor out = Alloc(*backend_, Shape{5, 16});
  ASSERT_OK(mlp->Forward(*backend_, x, out));
  Tensor dx = Alloc(*backend_, Shape{5, 16});
  ASSERT_OK(mlp->Backward(*backend_, DeviceF32(*backend_, r, Shape{5, 16}), dx, 0.0f));
  auto loss = [&]() {
    Tensor o = Alloc(*backend_, Shape{5, 16});
    SY_CHECK_OK(mlp->Forward(*backend_, x, o));
    return Dot(ToHost(*backend_, o), r);
  };
  const Parameter* w = store_.Find("mlp/w_down");
  std::vector<float> g = ToHost(*backend_, w->grad);
  EXPECT_EQ(CheckDirectionalGradient(*backend_, w->value, g, loss, nullptr).failed, 0);
  std::vector<float> scaled = g;
  for (float& v : scaled) v *= 1.1f;
  EXPECT_GT(CheckDirectionalGradient(*backend_, w->value, scaled, loss, nullptr).failed, 0);
  std::vector<float> flipped = g;
  for (size_t i = 0; i < flipped.size() / 4; ++i) flipped[i] = -flipped[i];
  EXPECT_GT(CheckDirectionalGradient(*backend_, w->value, flipped, loss, nullptr).failed, 0);
}

}  // namespace
}  // namespace sy
