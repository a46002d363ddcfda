// The MoE model against an independent PyTorch implementation (tests/model/torch_moe_oracle.py,
// run with Debian's python3-torch at /usr/bin/python3). Switchyard writes its weights, tokens and
// targets; the oracle rebuilds the same model from the definitions in float64 and returns the
// logits, the loss terms and the gradient of every parameter. We compare them with Switchyard's
// f32 results.
//
// Tolerances. For every compared tensor: max |ours - oracle| <= 1e-4 * max |oracle| (with a 1e-7
// floor for tensors that are all zero, such as idle experts). Losses agree within 1e-5 relative.
// The f32 round-off measured on these sizes is about 1e-6 relative. A transposed square weight, a
// missing 1/sqrt(D) or RMSNorm scale, a wrong RoPE pairing or a lost aux-loss factor each move
// some tensor by more than 1e-2 relative, so they fail by orders of magnitude.
//
// Routing is discrete: Switchyard's f32 logits and the oracle's f64 logits could order a near
// tie differently. The test therefore first checks that both chose the same experts (and
// dropped the same slots). The seeds below are fixed so this holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/model/moe_model.h"
#include "tests/model/model_test_util.h"
#include "tests/model/torch_oracle_util.h"

#ifndef SY_TORCH_ORACLE_SCRIPT
#error "SY_TORCH_ORACLE_SCRIPT must name tests/model/torch_moe_oracle.py"
#endif

namespace sy {
namespace {

using json = nlohmann::json;
using testing::ToHost;

constexpr double kTensorRtol = 1e-4;
constexpr double kLossRtol = 1e-5;

struct OracleCase {
  const char* name;
  ModelConfig config;
};

ModelConfig Base() {
  ModelConfig c;
  c.vocab_size = 40;
  c.hidden_size = 16;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 4;
  c.intermediate_size = 20;
  c.num_experts = 6;
  c.moe_intermediate_size = 12;
  c.top_k = 2;
  c.router_aux_loss_coef = 0.02;
  c.router_z_loss_coef = 0.001;
  c.rope_theta = 500.0;
  c.rms_norm_eps = 1e-5;
  return c;
}

std::vector<OracleCase> Cases() {
  std::vector<OracleCase> cases;
  {  // Mixtral-like, top-1 (renormalised weights are 1: the gate learns through aux and z only).
    ModelConfig c = Base();
    c.top_k = 1;
    c.norm_topk_prob = true;
    cases.push_back({"top1_mha", c});
  }
  {  // Top-1 without renormalisation: the gate gets the task gradient through the weights.
    ModelConfig c = Base();
    c.top_k = 1;
    c.norm_topk_prob = false;
    c.num_kv_heads = 1;
    cases.push_back({"top1_plain_mqa", c});
  }
  {  // Qwen2-MoE-like: GQA, q/k/v bias, shared expert with its sigmoid gate, no renorm.
    ModelConfig c = Base();
    c.num_kv_heads = 2;
    c.attention_bias = true;
    c.norm_topk_prob = false;
    c.num_shared_experts = 1;
    c.shared_expert_intermediate_size = 10;
    c.shared_expert_gate = true;
    cases.push_back({"top2_gqa_bias_shared_gate", c});
  }
  {  // Pre-gated, Qwen3-like q/k norm per head, a dense first layer, tied embeddings.
    ModelConfig c = Base();
    c.num_layers = 4;
    c.first_k_dense = 1;
    c.pregate = true;
    c.qk_norm = true;
    c.num_kv_heads = 2;
    c.tie_word_embeddings = true;
    cases.push_back({"top2_pregate_qknorm_dense_tied", c});
  }
  {  // DeepSeek-like: two shared experts without gate, no renorm, MoE every other layer,
     // OLMoE-style full-width q/k norm, capacity dropping, pre-gated top-1.
    ModelConfig c = Base();
    c.num_layers = 5;
    c.first_k_dense = 1;
    c.moe_every = 2;
    c.top_k = 1;
    c.norm_topk_prob = false;
    c.num_shared_experts = 2;
    c.shared_expert_intermediate_size = 6;
    c.qk_norm = true;
    c.qk_norm_per_head = false;
    c.capacity_factor = 1.0;
    c.pregate = true;
    cases.push_back({"top1_pregate_capacity_shared2", c});
  }
  {  // Top-2 without pre-gate, with capacity dropping and a shared expert without gate.
    ModelConfig c = Base();
    c.capacity_factor = 0.75;
    c.num_shared_experts = 1;
    c.num_kv_heads = 2;
    cases.push_back({"top2_capacity_shared", c});
  }
  return cases;
}

class TorchOracleTest : public ::testing::TestWithParam<OracleCase> {};

TEST_P(TorchOracleTest, LogitsLossAndEveryGradient) {
  std::string why;
  if (!sy::testing::PythonTorchAvailable(&why)) GTEST_SKIP() << why;
  const OracleCase& oc = GetParam();
  const ModelConfig& config = oc.config;
  auto backend = testing::MakeBackend(Device::Cpu());
  auto created = MoeModel::Create(*backend, config);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  MoeModel& model = **created;
  ASSERT_TRUE(model.InitializeParameters(/*seed=*/1234, /*stddev=*/0.25f).ok());
  uint64_t seed = 77;
  for (Parameter& p : model.parameters()) {  // norms and biases away from 1 and 0
    if (p.init == ParamInit::kNormal) continue;
    std::vector<float> v = ToHost(*backend, p.value);
    std::vector<float> n = testing::RandomNormal(v.size(), seed++, 0.2f);
    for (size_t i = 0; i < v.size(); ++i) v[i] += n[i];
    testing::FromHost(*backend, v, p.value);
  }

  const int64_t b = 2, t = 5;
  std::vector<int32_t> tokens = testing::RandomTokens(b * t, config.vocab_size, 5);
  std::vector<int32_t> targets = testing::RandomTokens(b * t, config.vocab_size, 6);
  targets[1] = -1;
  targets[7] = -1;
  model.ZeroGrads();
  auto report =
      model.Forward(testing::HostI32(tokens, Shape{b, t}), testing::HostI32(targets, Shape{b, t}));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::vector<float> logits = ToHost(*backend, model.logits());
  std::vector<DispatchPlan> plans;
  for (int m = 0; m < config.NumMoeLayers(); ++m) plans.push_back(model.moe_layer(m).plan());
  ASSERT_TRUE(model.Backward().ok());

  // Write the case.
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("sy_torch_oracle_" + std::string(oc.name));
  std::filesystem::create_directories(dir);
  json manifest{{"config", testing::ModelConfigJson(config)},
                {"batch", b},
                {"seq_len", t},
                {"tokens", tokens},
                {"targets", targets}};
  json tensors = json::array();
  {
    std::ofstream bin(dir / "params.bin", std::ios::binary);
    int64_t offset = 0;
    for (const Parameter& p : model.parameters()) {
      std::vector<float> v = ToHost(*backend, p.value);
      std::vector<int64_t> shape(p.value.shape().dims().begin(), p.value.shape().dims().end());
      tensors.push_back({{"name", p.name}, {"shape", shape}, {"offset", offset}});
      bin.write(reinterpret_cast<const char*>(v.data()),
                static_cast<std::streamsize>(v.size() * sizeof(float)));
      offset += static_cast<int64_t>(v.size() * sizeof(float));
    }
    ASSERT_TRUE(bin.good());
  }
  manifest["tensors"] = tensors;
  {
    std::ofstream f(dir / "manifest.json");
    f << manifest.dump();
  }

  // Run the oracle.
  const std::string cmd = std::string(sy::testing::kOraclePython) + " " + SY_TORCH_ORACLE_SCRIPT +
                          " " + dir.string() + " > " + (dir / "oracle.log").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::string log;
  {
    std::ifstream f(dir / "oracle.log");
    log.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  ASSERT_EQ(rc, 0) << "oracle failed: " << cmd << "\n" << log;
  json out;
  {
    std::ifstream f(dir / "oracle.json");
    out = json::parse(f);
  }
  std::vector<char> blob;
  {
    std::ifstream f(dir / "oracle.bin", std::ios::binary);
    blob.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  auto oracle_tensor = [&](const std::string& name) {
    for (const json& e : out["tensors"]) {
      if (e["name"] != name) continue;
      int64_t count = 1;
      for (int64_t s : e["shape"]) count *= s;
      std::vector<double> v(static_cast<size_t>(count));
      const int64_t offset = e["offset"];
      SY_CHECK_LE(offset + count * 8, static_cast<int64_t>(blob.size()));
      std::memcpy(v.data(), blob.data() + offset, v.size() * sizeof(double));
      return v;
    }
    ADD_FAILURE() << "oracle output lacks " << name;
    return std::vector<double>();
  };

  // Same routing decisions, or the comparison below is meaningless.
  ASSERT_EQ(out["routing"].size(), plans.size());
  for (size_t m = 0; m < plans.size(); ++m) {
    const json& chosen = out["routing"][m];
    const json& kept = out["kept"][m];
    const int k = config.top_k;
    std::vector<int64_t> routed(static_cast<size_t>(config.num_experts), 0);
    int64_t dropped = 0;
    for (size_t n = 0; n < chosen.size(); ++n) {
      for (int j = 0; j < k; ++j) {
        routed[chosen[n][j].get<size_t>()]++;
        dropped += kept[n][j].get<bool>() ? 0 : 1;
      }
    }
    EXPECT_EQ(plans[m].routed, routed) << "MoE layer " << m << ": different expert choice";
    EXPECT_EQ(plans[m].num_dropped(), dropped) << "MoE layer " << m << ": different drops";
    if (config.capacity_factor > 0.0 && m == 0) {
      EXPECT_GT(dropped, 0) << "no drop exercised";
    }
  }

  auto expect_close = [&](const std::string& what, const std::vector<float>& ours,
                          const std::vector<double>& ref) {
    ASSERT_EQ(ours.size(), ref.size()) << what;
    double max_ref = 0, max_err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(ref[i]));
      const double err = std::abs(static_cast<double>(ours[i]) - ref[i]);
      if (err > max_err) {
        max_err = err;
        worst = i;
      }
    }
    const double tol = std::max(kTensorRtol * max_ref, 1e-7);
    EXPECT_LE(max_err, tol) << what << ": max |err| " << max_err << " at " << worst << " (ours "
                            << ours[worst] << ", oracle " << ref[worst] << "), max |oracle| "
                            << max_ref;
    if (std::getenv("SY_ORACLE_VERBOSE") != nullptr) {
      std::printf("%-48s max|ref| %.3e  err/max %.3e\n", what.c_str(), max_ref,
                  max_ref > 0 ? max_err / max_ref : max_err);
    }
  };
  auto expect_loss = [&](const char* what, double ours, double ref) {
    EXPECT_LE(std::abs(ours - ref), kLossRtol * std::max(1.0, std::abs(ref)))
        << what << ": ours " << ours << " oracle " << ref;
  };
  expect_loss("loss", report->loss, out["loss"].get<double>());
  expect_loss("ce_loss", report->ce_loss, out["ce_loss"].get<double>());
  expect_loss("aux_loss", report->aux_loss, out["aux_loss"].get<double>());
  expect_loss("z_loss", report->z_loss, out["z_loss"].get<double>());
  expect_close("logits", logits, oracle_tensor("logits"));
  for (const Parameter& p : model.parameters()) {
    expect_close("grad/" + p.name, ToHost(*backend, p.grad), oracle_tensor("grad/" + p.name));
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, TorchOracleTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace sy
