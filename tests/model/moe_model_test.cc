// MoeModel behaviour: recomputation, cpu/sim agreement, gradient accumulation, the pre-gate
// initialisation from a conventional model, the forward-only bf16 path, input validation, and the
// parameter registry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/quant_blocks.h"
#include "runtime/model/dense_matrices.h"
#include "runtime/model/moe_model.h"
#include "runtime/model/pregate_init.h"
#include "tests/model/model_test_util.h"

namespace sy {
namespace {

using testing::HostI32;
using testing::ToHost;

struct Trained {
  LossReport report;
  std::vector<float> logits;
  std::map<std::string, std::vector<float>> grads;
};

std::unique_ptr<MoeModel> MakeModel(Backend& backend, const ModelConfig& config,
                                    ModelOptions options = {}, uint64_t seed = 3) {
  auto m = MoeModel::Create(backend, config, options);
  SY_CHECK(m.ok()) << m.status().ToString();
  SY_CHECK_OK((*m)->InitializeParameters(seed, 0.3f));
  return std::move(m).value();
}

Trained Step(MoeModel& model, int64_t b = 2, int64_t t = 6, bool zero = true) {
  const ModelConfig& c = model.config();
  Tensor tok = HostI32(testing::RandomTokens(b * t, c.vocab_size, 8), Shape{b, t});
  Tensor tgt = HostI32(testing::RandomTokens(b * t, c.vocab_size, 9), Shape{b, t});
  if (zero) model.ZeroGrads();
  auto r = model.Forward(tok, tgt);
  SY_CHECK(r.ok()) << r.status().ToString();
  Trained out;
  out.report = *r;
  out.logits = ToHost(model.backend(), model.logits());
  SY_CHECK_OK(model.Backward());
  for (const Parameter& p : model.parameters()) out.grads[p.name] = ToHost(model.backend(), p.grad);
  return out;
}

ModelConfig Featureful() {
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 3;
  c.first_k_dense = 1;
  c.num_kv_heads = 2;
  c.qk_norm = true;
  c.num_shared_experts = 1;
  c.shared_expert_gate = true;
  c.router_aux_loss_coef = 0.01;
  c.router_z_loss_coef = 0.001;
  c.capacity_factor = 1.5;
  return c;
}

TEST(MoeModelTest, RecomputeGivesIdenticalResults) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = Featureful();
  c.pregate = true;
  c.num_layers = 4;
  auto plain = MakeModel(*backend, c);
  c.recompute = true;
  auto recomputed = MakeModel(*backend, c);
  Trained a = Step(*plain);
  Trained b = Step(*recomputed);
  EXPECT_EQ(a.report.loss, b.report.loss);
  EXPECT_EQ(a.logits, b.logits);
  for (const auto& [name, g] : a.grads) EXPECT_EQ(g, b.grads.at(name)) << name;
}

TEST(MoeModelTest, PerLayerRecomputeGivesIdenticalResults) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = Featureful();
  auto plain = MakeModel(*backend, c);
  auto mixed = MakeModel(*backend, c);
  mixed->SetRecompute(1, true);
  Trained a = Step(*plain);
  Trained b = Step(*mixed);
  for (const auto& [name, g] : a.grads) EXPECT_EQ(g, b.grads.at(name)) << name;
}

TEST(MoeModelTest, CpuAndSimAgree) {
  auto cpu = testing::MakeBackend(Device::Cpu());
  auto sim = testing::MakeBackend(Device::Sim());
  ModelConfig c = Featureful();
  c.pregate = true;
  auto on_cpu = MakeModel(*cpu, c);
  auto on_sim = MakeModel(*sim, c);
  Trained a = Step(*on_cpu);
  Trained b = Step(*on_sim);
  EXPECT_EQ(a.report.loss, b.report.loss);
  EXPECT_EQ(a.logits, b.logits);
  for (const auto& [name, g] : a.grads) EXPECT_EQ(g, b.grads.at(name)) << name;
}

TEST(MoeModelTest, GradientsAccumulateUntilZeroed) {
  auto backend = testing::MakeBackend(Device::Sim());
  auto model = MakeModel(*backend, Featureful());
  Trained once = Step(*model);
  Trained twice = Step(*model, 2, 6, /*zero=*/false);
  for (const auto& [name, g] : once.grads) {
    const std::vector<float>& g2 = twice.grads.at(name);
    double max_err = 0, max_g = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      max_err = std::max(max_err, std::abs(g2[i] - 2.0 * g[i]));
      max_g = std::max(max_g, std::abs(2.0 * g[i]));
    }
    EXPECT_LE(max_err, 1e-5 * max_g + 1e-12) << name;
  }
  Trained again = Step(*model);
  for (const auto& [name, g] : once.grads) EXPECT_EQ(g, again.grads.at(name)) << name;
}

// A conventional model whose residual stream does not change between MoE blocks (attention and
// the experts of every block but the last output zero) routes block m+1 from the same input as
// block m. Converting it with InitPregatesFromGates must then give the same logits and loss. The
// gradient of pre-gate m must equal the gradient of conventional gate m+1.
TEST(MoeModelTest, PregatesInitialisedFromGatesReproduceTheConventionalModel) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 3;
  c.router_aux_loss_coef = 0.05;
  c.router_z_loss_coef = 0.01;
  auto conventional = MakeModel(*backend, c);
  for (Parameter& p : conventional->parameters()) {
    const bool attn_out = p.name.find("/attn/wo") != std::string::npos;
    const bool silent_expert = p.is_expert && p.layer < 2 && p.name.ends_with("w_down");
    if (attn_out || silent_expert) backend->Fill(p.value, 0.0f);
  }
  ModelConfig pc = c;
  pc.pregate = true;
  auto pregated = MakeModel(*backend, pc, {}, /*seed=*/99);
  ParameterStore& ps = pregated->parameters();
  EXPECT_NE(ps.Find("layers/0/moe/gate"), nullptr);
  EXPECT_NE(ps.Find("layers/0/moe/pregate"), nullptr);
  EXPECT_NE(ps.Find("layers/1/moe/pregate"), nullptr);
  EXPECT_EQ(ps.Find("layers/1/moe/gate"), nullptr);
  EXPECT_EQ(ps.Find("layers/2/moe/gate"), nullptr);
  EXPECT_EQ(ps.Find("layers/2/moe/pregate"), nullptr);

  Trained before = Step(*pregated);
  ASSERT_TRUE(InitPregatesFromGates(*backend, conventional->parameters(), pc, ps).ok());
  Trained a = Step(*conventional);
  Trained b = Step(*pregated);
  EXPECT_NEAR(a.report.loss, b.report.loss, 1e-6);
  EXPECT_NEAR(a.report.aux_loss, b.report.aux_loss, 1e-6);
  EXPECT_NE(before.report.loss, b.report.loss) << "initialisation changed nothing";
  double max_err = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    max_err = std::max(max_err, static_cast<double>(std::abs(a.logits[i] - b.logits[i])));
  }
  EXPECT_LE(max_err, 1e-5);
  auto expect_same_grad = [&](const std::string& ours, const std::string& theirs) {
    const std::vector<float>& g = b.grads.at(ours);
    const std::vector<float>& h = a.grads.at(theirs);
    double norm = 0, err = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      norm = std::max(norm, static_cast<double>(std::abs(h[i])));
      err = std::max(err, static_cast<double>(std::abs(g[i] - h[i])));
    }
    EXPECT_GT(norm, 0.0) << theirs;
    EXPECT_LE(err, 1e-4 * norm) << ours << " vs " << theirs;
  };
  expect_same_grad("layers/0/moe/gate", "layers/0/moe/gate");
  expect_same_grad("layers/0/moe/pregate", "layers/1/moe/gate");
  expect_same_grad("layers/1/moe/pregate", "layers/2/moe/gate");

  // Unrelated shapes are refused, naming the parameter.
  ModelConfig other = c;
  other.num_experts = 4;
  auto small = MakeModel(*backend, other);
  Status s = InitPregatesFromGates(*backend, small->parameters(), pc, ps);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layers/0/moe/gate"), std::string::npos) << s.ToString();
}

// With generic weights the pre-gated model routes differently from the conventional one: the
// wiring really uses the previous block's input.
TEST(MoeModelTest, PregatedRoutingDiffersFromConventionalOnGenericWeights) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = testing::TinyConfig();
  c.num_layers = 3;
  auto conventional = MakeModel(*backend, c);
  ModelConfig pc = c;
  pc.pregate = true;
  auto pregated = MakeModel(*backend, pc);
  ASSERT_TRUE(
      InitPregatesFromGates(*backend, conventional->parameters(), pc, pregated->parameters()).ok());
  Trained a = Step(*conventional);
  Trained b = Step(*pregated);
  EXPECT_GT(std::abs(a.report.loss - b.report.loss), 1e-5);
}

// Forward-only bf16 weights give the f32 model's logits for the bf16-rounded weights (the compute
// is f32 in both; only storage differs).
TEST(MoeModelTest, ForwardOnlyBf16MatchesF32OnRoundedWeights) {
  for (Device device : {Device::Cpu(), Device::Sim()}) {
    SCOPED_TRACE(device.ToString());
    auto backend = testing::MakeBackend(device);
    ModelConfig c = Featureful();
    c.attention_bias = true;
    auto f32 = MakeModel(*backend, c);
    auto bf16 =
        MakeModel(*backend, c, ModelOptions{.weight_dtype = DType::kBF16, .with_grad = false});
    for (Parameter& p : f32->parameters()) {
      std::vector<float> v = ToHost(*backend, p.value);
      if (p.init != ParamInit::kZeros) {
        for (float& x : v) x = BF16ToF32(F32ToBF16(x));
      }
      testing::FromHost(*backend, v, p.value);
      Parameter* q = bf16->parameters().Find(p.name);
      ASSERT_NE(q, nullptr) << p.name;
      EXPECT_EQ(q->value.dtype(), p.init == ParamInit::kZeros ? DType::kF32 : DType::kBF16)
          << p.name;
      EXPECT_FALSE(q->grad.defined());
      testing::FromHost(*backend, v, q->value);
    }
    Tensor tok = HostI32(testing::RandomTokens(12, c.vocab_size, 4), Shape{2, 6});
    Tensor tgt = HostI32(testing::RandomTokens(12, c.vocab_size, 5), Shape{2, 6});
    auto ra = f32->Forward(tok, tgt);
    auto rb = bf16->Forward(tok, tgt);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_NEAR(ra->loss, rb->loss, 1e-5);
    std::vector<float> la = ToHost(*backend, f32->logits());
    std::vector<float> lb = ToHost(*backend, bf16->logits());
    double err = 0;
    for (size_t i = 0; i < la.size(); ++i) err = std::max(err, double(std::abs(la[i] - lb[i])));
    EXPECT_LE(err, 1e-5);
    Status s = bf16->Backward();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    // Logits only, no targets.
    auto rc = bf16->Forward(tok, Tensor());
    ASSERT_TRUE(rc.ok());
    EXPECT_EQ(rc->num_targets, 0);
    EXPECT_EQ(ToHost(*backend, bf16->logits()), lb);
  }
}

// Mixed precision (Note [mixed precision] in runtime/model/moe_model.h): a model with bf16 or f16
// weights and activations, given the f32 model's weights rounded to that dtype, gives the f32
// model's loss and every gradient up to the activations' rounding. Each token goes to every
// expert (top_k = num_experts), so that a rounding cannot flip a routing decision, which would
// move an expert's gradient by 100%. Bounds: each parameter's gradient sums products through
// about ten roundings of relative size up to 2^-8 (bf16) or 2^-11 (f16), with cancellation, so its
// relative L2 error is a few 1e-2 (bf16; measured up to 0.055) and 8x less for f16 (measured up
// to 0.0058); the bounds, 0.1 and 0.0125, keep that ratio. A wrong or missing term in any gradient
// is an error of order 1, and a step computed at the wrong precision would not scale 8x. The
// gradients stay f32 and accumulate there.
TEST(MoeModelTest, MixedPrecisionTracksF32OnRoundedWeights) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (Device device : {Device::Cpu(), Device::Sim()}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " on " + device.ToString());
      const double tol = dtype == DType::kBF16 ? 0.1 : 0.0125;
      auto backend = testing::MakeBackend(device);
      ModelConfig c = Featureful();
      c.attention_bias = true;
      c.capacity_factor = 0;  // dropless: a rounding cannot drop a token the f32 model keeps
      c.top_k = c.num_experts;
      auto f32 = MakeModel(*backend, c);
      auto mixed =
          MakeModel(*backend, c,
                    ModelOptions{.weight_dtype = dtype, .compute_dtype = dtype, .with_grad = true});
      for (Parameter& p : f32->parameters()) {
        std::vector<float> v = ToHost(*backend, p.value);
        Parameter* q = mixed->parameters().Find(p.name);
        ASSERT_NE(q, nullptr) << p.name;
        EXPECT_EQ(q->value.dtype(), p.init == ParamInit::kZeros ? DType::kF32 : dtype) << p.name;
        EXPECT_EQ(q->grad.dtype(), DType::kF32) << p.name;
        if (q->value.dtype() != DType::kF32) {
          for (float& x : v) {
            x = dtype == DType::kBF16 ? BF16ToF32(F32ToBF16(x)) : F16ToF32(F32ToF16(x));
          }
        }
        testing::FromHost(*backend, v, p.value);
        testing::FromHost(*backend, v, q->value);
      }
      Trained a = Step(*f32);
      Trained b = Step(*mixed);
      // The loss averages over tokens: its error is a tenth of the gradients' bound.
      EXPECT_NEAR(b.report.loss, a.report.loss, tol / 10 * std::abs(a.report.loss));
      EXPECT_NEAR(b.report.aux_loss, a.report.aux_loss, tol / 10 * std::abs(a.report.aux_loss));
      for (const auto& [name, ga] : a.grads) {
        const std::vector<float>& gb = b.grads.at(name);
        double diff = 0, norm = 0;
        for (size_t i = 0; i < ga.size(); ++i) {
          diff += (double(gb[i]) - ga[i]) * (double(gb[i]) - ga[i]);
          norm += double(ga[i]) * ga[i];
        }
        EXPECT_LE(std::sqrt(diff), tol * std::sqrt(norm) + 1e-7) << name;
      }
      // Gradients accumulate in f32 over a second backward.
      Trained twice = Step(*mixed, 2, 6, /*zero=*/false);
      for (const auto& [name, g1] : b.grads) {
        const std::vector<float>& g2 = twice.grads.at(name);
        for (size_t i = 0; i < g1.size(); i += 7) {
          ASSERT_NEAR(g2[i], 2 * g1[i], 1e-5 * std::abs(g1[i]) + 1e-12) << name;
        }
      }
      // Incremental decoding stays f32.
      EXPECT_EQ(mixed->options().compute_dtype, dtype);
    }
  }
}

// Training with 16-bit weights needs them to be the compute copy.
TEST(MoeModelTest, SixteenBitWeightsWithGradientsNeedTheComputeDType) {
  auto backend = testing::MakeBackend(Device::Cpu());
  auto m = MoeModel::Create(*backend, Featureful(),
                            ModelOptions{.weight_dtype = DType::kBF16, .with_grad = true});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("compute_dtype"), std::string::npos) << m.status().ToString();
  auto bad = MoeModel::Create(*backend, Featureful(), ModelOptions{.compute_dtype = DType::kI32});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("compute_dtype"), std::string::npos);
}

// Both models' logits on the same 12 random tokens: the largest difference, and the largest |logit|
// of `reference` (at least 1).
std::pair<double, double> LogitsGap(Backend& backend, MoeModel& reference, MoeModel& model) {
  Tensor tok = HostI32(testing::RandomTokens(12, reference.config().vocab_size, 4), Shape{2, 6});
  SY_CHECK_OK(reference.Forward(tok, Tensor()).status());
  SY_CHECK_OK(model.Forward(tok, Tensor()).status());
  const std::vector<float> la = ToHost(backend, reference.logits());
  const std::vector<float> lb = ToHost(backend, model.logits());
  double err = 0, scale = 1;
  for (size_t i = 0; i < la.size(); ++i) {
    err = std::max(err, double(std::abs(la[i] - lb[i])));
    scale = std::max(scale, double(std::abs(la[i])));
  }
  return {err, scale};
}

// Dense matrices in their own dtypes (ModelOptions::matrix_dtypes): each named matrix is
// allocated in its dtype, everything else stays in weight_dtype, and the forward gives the logits
// of the f32 model holding the blocks' values up to the rounding of the quantized matrices'
// inputs to 8 bits (runtime/core/quant_blocks.h), to a loose bound. Wrong names, training and rows
// that are not whole blocks are refused, naming the matrix.
TEST(MoeModelTest, DenseMatricesInTheirOwnDTypes) {
  for (Device device : {Device::Cpu(), Device::Sim()}) {
    SCOPED_TRACE(device.ToString());
    auto backend = testing::MakeBackend(device);
    ModelConfig c = Featureful();
    c.hidden_size = 64;
    c.head_dim = 16;
    c.intermediate_size = 64;
    c.moe_intermediate_size = 32;
    c.shared_expert_intermediate_size = 32;
    ModelOptions options{.with_grad = false};
    for (const DenseMatrix& m : DenseMatrices(c)) options.matrix_dtypes[m.name] = DType::kQ8_0;
    options.matrix_dtypes["lm_head"] = DType::kQ4_0;
    options.matrix_dtypes["layers/1/attn/wv"] = DType::kBF16;
    auto held = MakeModel(*backend, c, options);
    auto f32 = MakeModel(*backend, c);
    int quantized = 0;
    for (Parameter& p : held->parameters()) {
      auto it = options.matrix_dtypes.find(p.name);
      const DType want = it != options.matrix_dtypes.end() ? it->second : DType::kF32;
      EXPECT_EQ(p.value.dtype(), want) << p.name;
      quantized += IsQuantized(p.value.dtype());
      Parameter* mine = f32->parameters().Find(p.name);
      ASSERT_NE(mine, nullptr) << p.name;
      testing::FromHost(*backend, ToHost(*backend, p.value), mine->value);
    }
    // 3 layers x 4 attention matrices, one dense FFN and two shared-expert FFNs of 3 each, the
    // LM head, less the bf16 wv.
    EXPECT_EQ(quantized, 3 * 4 + 3 * 3 + 1 - 1);
    const auto [err, scale] = LogitsGap(*backend, *f32, *held);
    // The quantized matrices' inputs were rounded: 21 roundings of ~0.3% each, compounded over
    // three layers of sharp attention (weights of stddev 0.3), move the logits by ~5% of their
    // largest; a matrix read in the wrong layout or dtype moves them by about all of it. The
    // exact check is tests/inference/gguf_oracle.py, which emulates the rounding.
    EXPECT_GT(err, 0.0);
    EXPECT_LE(err, 0.15 * scale);
  }
  auto backend = testing::MakeBackend(Device::Cpu());
  const ModelConfig tiny = testing::TinyConfig();  // hidden 16: not whole blocks of 32
  auto refused = [&](std::map<std::string, DType> dtypes, bool with_grad, const char* needle) {
    auto m = MoeModel::Create(*backend, tiny,
                              ModelOptions{.with_grad = with_grad, .matrix_dtypes = dtypes});
    ASSERT_FALSE(m.ok()) << needle;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().ToString().find(needle), std::string::npos) << m.status().ToString();
  };
  refused({{"layers/0/moe/gate", DType::kBF16}}, false, "layers/0/moe/gate");
  refused({{"embed_tokens", DType::kQ8_0}}, false, "not a dense matrix");
  refused({{"layers/0/attn/wq", DType::kQ8_0}}, false, "whole blocks");
  refused({{"layers/0/attn/wq", DType::kBF16}}, true, "forward-only");
  refused({{"layers/0/attn/wq", DType::kI32}}, false, "expected f32");
}

// Routed experts in per-layer, per-matrix dtypes (ModelOptions::expert_layer_dtypes, as a Q4_K_M
// GGUF holds them): each expert matrix is allocated in its layer's dtype, and the forward gives
// the logits of the f32 model holding the blocks' values, up to the rounding of the quantized
// matrices' inputs to 8 bits (to the loose bound of DenseMatricesInTheirOwnDTypes; the exact check
// is tests/inference/gguf_oracle.py). A layer that is not an MoE layer, training, and rows that
// are not whole blocks are refused, naming the layer.
TEST(MoeModelTest, ExpertsInPerLayerDTypes) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = Featureful();  // layer 0 dense, layers 1 and 2 MoE
  c.hidden_size = 256;
  c.head_dim = 64;
  c.intermediate_size = 256;
  c.moe_intermediate_size = 256;
  c.shared_expert_intermediate_size = 256;
  const ExpertMatrixDTypes layer2{DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  ModelOptions options{.with_grad = false,
                       .expert_weight_dtype = DType::kQ8_0,
                       .expert_layer_dtypes = {{2, layer2}}};
  auto mixed = MoeModel::Create(*backend, c, options);
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  auto f32 = MakeModel(*backend, c);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> small(1e-4f, 5e-4f);
  int checked = 0;
  for (Parameter& p : (*mixed)->parameters()) {
    Parameter* mine = f32->parameters().Find(p.name);
    ASSERT_NE(mine, nullptr) << p.name;
    const DType t = p.value.dtype();
    if (p.name.find("experts/layer2/") == 0) {
      const std::string_view matrix = std::string_view(p.name).substr(p.name.rfind('/') + 1);
      const DType want = matrix == "w_gate" ? layer2.gate
                         : matrix == "w_up" ? layer2.up
                                            : layer2.down;
      EXPECT_EQ(t, want) << p.name;
      ++checked;
    } else if (p.name.find("experts/layer1/") == 0) {
      EXPECT_EQ(t, DType::kQ8_0) << p.name;
    }
    if (!IsQuantized(t)) {
      testing::FromHost(*backend, ToHost(*backend, mine->value), p.value);
      continue;
    }
    // Random blocks with small f16 super-block scales (KQuantScaleOffsets; q8_0: d at 0 of each
    // 34).
    std::vector<uint8_t> blocks(p.value.nbytes());
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(byte(rng));
    const std::vector<size_t> scales =
        t == DType::kQ8_0 ? std::vector<size_t>{0} : KQuantScaleOffsets(t);
    for (size_t b = 0; b < blocks.size(); b += DTypeBlockBytes(t)) {
      for (size_t offset : scales) {
        const F16 d = F32ToF16(t == DType::kQ8_0 ? small(rng) * 40.0f : small(rng));
        std::memcpy(&blocks[b + offset], &d.bits, 2);
      }
    }
    backend->CopyAsync(Tensor::Wrap(blocks.data(), t, p.value.shape()), p.value,
                       backend->compute_stream());
    backend->SynchronizeStream(backend->compute_stream());
    std::vector<float> values(static_cast<size_t>(p.value.numel()));
    DequantizeBlocks(t, blocks.data(), values.data(), p.value.numel());
    testing::FromHost(*backend, values, mine->value);
  }
  EXPECT_EQ(checked, 3 * c.num_experts);
  const auto [err, scale] = LogitsGap(*backend, *f32, **mixed);
  EXPECT_GT(err, 0.0);
  EXPECT_LE(err, 0.15 * scale);

  auto refused = [&](ModelConfig config, ModelOptions o, const char* needle) {
    auto m = MoeModel::Create(*backend, config, o);
    ASSERT_FALSE(m.ok()) << needle;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().ToString().find(needle), std::string::npos) << m.status().ToString();
  };
  const ExpertMatrixDTypes k = ExpertMatrixDTypes::All(DType::kQ6_K);
  refused(c, ModelOptions{.with_grad = false, .expert_layer_dtypes = {{0, k}}},
          "expert_layer_dtypes[0]: layer 0 is not an MoE layer");
  refused(c, ModelOptions{.with_grad = true, .expert_layer_dtypes = {{1, k}}}, "with_grad");
  ModelConfig narrow = c;
  narrow.moe_intermediate_size = 128;  // not whole blocks of 256
  refused(narrow, ModelOptions{.with_grad = false, .expert_layer_dtypes = {{1, k}}},
          "expert_layer_dtypes[1]) need hidden_size");
}

TEST(MoeModelTest, RejectsBadInputsAndStates) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = testing::TinyConfig();
  auto model = MakeModel(*backend, c);
  EXPECT_EQ(model->Backward().code(), StatusCode::kFailedPrecondition);
  auto bad_token = model->Forward(HostI32({1, 2, 32}, Shape{1, 3}), Tensor());
  ASSERT_FALSE(bad_token.ok());
  EXPECT_NE(bad_token.status().message().find("tokens"), std::string::npos);
  auto bad_target =
      model->Forward(HostI32({1, 2, 3}, Shape{1, 3}), HostI32({1, -2, 3}, Shape{1, 3}));
  ASSERT_FALSE(bad_target.ok());
  EXPECT_NE(bad_target.status().message().find("targets"), std::string::npos);
  auto bad_shape = model->Forward(HostI32({1, 2, 3}, Shape{1, 3}), HostI32({1, 2, 3}, Shape{3, 1}));
  EXPECT_FALSE(bad_shape.ok());
  ASSERT_TRUE(model->Forward(HostI32({1, 2, 3}, Shape{1, 3}), Tensor()).ok());
  EXPECT_EQ(model->Backward().code(), StatusCode::kFailedPrecondition) << "no targets";
  auto bad_dtype = MoeModel::Create(*backend, c, ModelOptions{.weight_dtype = DType::kF16});
  EXPECT_EQ(bad_dtype.status().code(), StatusCode::kInvalidArgument);
  ModelConfig broken = c;
  broken.top_k = 0;
  auto invalid = MoeModel::Create(*backend, broken);
  ASSERT_FALSE(invalid.ok());
  EXPECT_NE(invalid.status().message().find("top_k"), std::string::npos);
}

TEST(MoeModelTest, AllTargetsIgnored) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = Featureful();
  auto model = MakeModel(*backend, c);
  model->ZeroGrads();
  auto r =
      model->Forward(HostI32({1, 2, 3, 4}, Shape{1, 4}), HostI32({-1, -1, -1, -1}, Shape{1, 4}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_targets, 0);
  EXPECT_EQ(r->ce_loss, 0.0f);
  EXPECT_NEAR(r->loss, c.router_aux_loss_coef * r->aux_loss + c.router_z_loss_coef * r->z_loss,
              1e-7);
  ASSERT_TRUE(model->Backward().ok());
  for (const Parameter& p : model->parameters()) {
    for (float g : ToHost(*backend, p.grad)) ASSERT_TRUE(std::isfinite(g)) << p.name;
  }
  // Only the routers learn (through aux and z): the LM head gets nothing.
  for (float g : ToHost(*backend, model->parameters().Find("lm_head")->grad)) EXPECT_EQ(g, 0.0f);
}

TEST(MoeModelTest, ParameterRegistry) {
  auto backend = testing::MakeBackend(Device::Cpu());
  ModelConfig c = Featureful();
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  auto model = MakeModel(*backend, c);
  const ParameterStore& ps = model->parameters();
  const int64_t h = c.hidden_size, v = c.vocab_size, d = c.dim_per_head();
  const int64_t q = c.num_heads * d, kv = c.kv_heads() * d;
  // An independent count from the config.
  int64_t expected = v * h + h;  // embeddings (tied head), final norm
  int64_t expected_expert = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    expected += 2 * h;                                    // norms
    expected += h * q + 2 * h * kv + q * h + q + 2 * kv;  // projections + biases
    expected += 2 * d;                                    // q/k norm per head
    if (c.IsMoeLayer(l)) {
      expected_expert += c.num_experts * 3 * h * c.moe_intermediate_size;
      expected += c.num_experts * h;                    // gate
      expected += 3 * h * c.shared_intermediate() + h;  // shared + its gate
    } else {
      expected += 3 * h * c.intermediate_size;
    }
  }
  EXPECT_EQ(ps.num_expert_elements(), expected_expert);
  EXPECT_EQ(ps.num_elements(), expected + expected_expert);
  EXPECT_EQ(ps.Find("lm_head"), nullptr);

  const Parameter* e = ps.Find("experts/layer2/expert5/w_down");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->is_expert);
  EXPECT_EQ(e->layer, 2);
  EXPECT_EQ(e->expert, 5);
  EXPECT_EQ(e->value.shape(), (Shape{h, c.moe_intermediate_size}));
  EXPECT_EQ(ps.Find("experts/layer2/expert5/w_gate")->value.shape(),
            (Shape{c.moe_intermediate_size, h}));
  EXPECT_EQ(ps.Find("experts/layer0/expert0/w_gate"), nullptr) << "layer 0 is dense";
  EXPECT_EQ(ps.Find("layers/0/mlp/w_up")->value.shape(), (Shape{c.intermediate_size, h}));
  EXPECT_EQ(ps.Find("layers/1/attn/wk")->value.shape(), (Shape{kv, h}));
  EXPECT_EQ(ps.Find("layers/1/attn/bq")->init, ParamInit::kZeros);
  EXPECT_EQ(ps.Find("layers/1/attn/q_norm")->value.shape(), (Shape{d}));
  EXPECT_EQ(ps.Find("layers/1/moe/shared_expert_gate")->value.shape(), (Shape{1, h}));
  EXPECT_FALSE(ps.Find("layers/1/moe/gate")->is_expert);
  // Expert views of one layer are consecutive slices of one stacked tensor.
  const Parameter* e0 = ps.Find("experts/layer1/expert0/w_up");
  const Parameter* e1 = ps.Find("experts/layer1/expert1/w_up");
  EXPECT_EQ(e0->value.buffer(), e1->value.buffer());
  EXPECT_EQ(static_cast<const char*>(e1->value.data()) - static_cast<const char*>(e0->value.data()),
            static_cast<ptrdiff_t>(e0->value.nbytes()));

  // Initial values depend on (seed, name) only.
  ModelConfig other = c;
  other.num_experts = 4;
  other.num_layers = 2;
  auto model2 = MakeModel(*backend, other);
  EXPECT_EQ(ToHost(*backend, ps.Find("layers/1/attn/wq")->value),
            ToHost(*backend, model2->parameters().Find("layers/1/attn/wq")->value));
  EXPECT_EQ(ToHost(*backend, ps.Find("experts/layer1/expert3/w_up")->value),
            ToHost(*backend, model2->parameters().Find("experts/layer1/expert3/w_up")->value));
}

}  // namespace
}  // namespace sy
