// AdamW, Adam and SGD against PyTorch as the oracle: the same initial params and gradients, ten
// steps with clip_grad_norm_ and a warmup + cosine learning rate, run here and by
// tests/optim/torch_optim_oracle.py with torch.optim, then compared state by state.
//
// Skips (visibly) when /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "runtime/core/check.h"

#ifndef SY_TORCH_OPTIM_ORACLE
#error "SY_TORCH_OPTIM_ORACLE must name tests/optim/torch_optim_oracle.py"
#endif

namespace sy {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

bool TorchAvailable() {
  static const bool available = [] {
    std::string cmd = std::string(kPython) + " -c 'import torch, numpy' > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0;
  }();
  return available;
}

std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "sy_optim_torch_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  char* dir = mkdtemp(buf.data());
  SY_CHECK(dir != nullptr) << "mkdtemp " << pattern;
  return dir;
}

template <typename T>
void WriteFile(const std::string& path, const std::vector<T>& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(T));
  SY_CHECK(out.good()) << "write " << path;
}

template <typename T>
std::vector<T> ReadFile(const std::string& path, size_t count) {
  std::ifstream in(path, std::ios::binary);
  std::vector<T> data(count);
  in.read(reinterpret_cast<char*>(data.data()), count * sizeof(T));
  EXPECT_TRUE(in.good() && in.gcount() == static_cast<std::streamsize>(count * sizeof(T)))
      << "short read of " << path;
  return data;
}

// Element-wise |got - want| <= rtol * |want| + atol_frac * max|want| (or bit-equal when
// `bitwise`); prints how many elements agree to the bit and the worst relative error.
void ExpectClose(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                 double rtol, double atol_frac, bool bitwise = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  double worst_rel = 0;
  size_t worst = 0, equal = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want[i];
    double err = std::abs(g - w);
    double allowed = rtol * std::abs(w) + atol_frac * scale;
    double rel = err / std::max(std::abs(w), 1e-30);
    if (got[i] == want[i]) ++equal;
    if (rel > worst_rel) {
      worst_rel = rel;
      worst = i;
    }
    if (bitwise) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
          << what << "[" << i << "]: ours " << g << " torch " << w;
    }
    ASSERT_LE(err, allowed) << what << "[" << i << "]: ours " << g << " torch " << w;
  }
  std::cout << "  " << what << ": " << equal << "/" << got.size()
            << " bitwise equal, worst relative error " << worst_rel << " at " << worst << "\n";
}

struct OracleCase {
  OptimizerOptions optimizer;
  double lr = 1e-3;
  double min_lr = 1e-4;
  float max_norm = 1.0f;
  // With clipping the two sides scale the gradients by coefficients that can differ in the last
  // bit (torch sums the norm in float32, we in double), so states are compared with tolerances.
  // Without clipping the arithmetic is the same operation for operation: every bit must agree.
  bool clip = true;
};

void RunAgainstTorch(const OracleCase& c) {
  if (!TorchAvailable()) {
    GTEST_SKIP() << kPython << " cannot import torch (install python3-torch); the PyTorch oracle "
                 << "comparison did not run";
  }
  // Odd sizes exercise the scalar tails; the large group spans many chunks of 4096 elements.
  const std::vector<size_t> sizes = {1001, 37, 70003};
  const int steps = 10;
  const int64_t warmup = 3, total = 10;
  size_t total_n = 0;
  for (size_t n : sizes) total_n += n;

  std::mt19937_64 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> params0(total_n), grads(steps * total_n);
  for (float& x : params0) x = normal(rng);
  // The global norm of N(0, 1) grads over 71041 elements is about 267: alternating gradient
  // scales of 1e-3 and 1e-2 give norms near 0.27 and 2.7, so with max_norm 1 half of the steps
  // clip and half do not.
  for (int s = 0; s < steps; ++s) {
    float scale = s % 2 == 0 ? 1e-2f : 1e-3f;
    for (size_t i = 0; i < total_n; ++i) grads[s * total_n + i] = scale * normal(rng);
  }

  std::string dir = MakeTempDir();
  WriteFile(dir + "/params.f32", params0);
  WriteFile(dir + "/grads.f32", grads);
  const OptimizerOptions& o = c.optimizer;
  const float max_norm = c.clip ? c.max_norm : 1e30f;
  std::ostringstream cmd;
  cmd.precision(17);
  cmd << kPython << " " << SY_TORCH_OPTIM_ORACLE << " --dir " << dir << " --optimizer "
      << OptimizerKindName(o.kind) << " --sizes " << sizes[0] << "," << sizes[1] << "," << sizes[2]
      << " --steps " << steps << " --lr " << c.lr << " --min-lr " << c.min_lr << " --warmup "
      << warmup << " --total " << total << " --beta1 " << o.beta1 << " --beta2 " << o.beta2
      << " --eps " << o.eps << " --weight-decay " << o.weight_decay << " --momentum " << o.momentum
      << " --dampening " << o.dampening << " --nesterov " << (o.nesterov ? 1 : 0) << " --max-norm "
      << max_norm << " > " << dir << "/oracle.log 2>&1";
  int rc = std::system(cmd.str().c_str());
  if (rc != 0) {
    std::ifstream log(dir + "/oracle.log");
    std::stringstream text;
    text << log.rdbuf();
    FAIL() << "oracle failed (" << rc << "): " << cmd.str() << "\n" << text.str();
  }

  // Our side: the same loop a trainer runs.
  LrScheduleOptions lr_opts;
  lr_opts.kind = LrScheduleKind::kWarmupCosine;
  lr_opts.lr = c.lr;
  lr_opts.min_lr = c.min_lr;
  lr_opts.warmup_steps = warmup;
  lr_opts.total_steps = total;
  auto schedule = LrSchedule::Create(lr_opts);
  ASSERT_TRUE(schedule.ok()) << schedule.status().ToString();
  OptimizerOptions opts = o;
  opts.chunk_elems = 4096;
  ThreadPool pool(3);
  auto optimizer = CreateOptimizer(opts, &pool);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().ToString();

  std::vector<float> param = params0, grad(total_n), m(total_n, 0.0f), v(total_n, 0.0f);
  std::vector<uint16_t> copy(total_n);
  std::vector<int64_t> step_counters(sizes.size(), 0);
  std::vector<ParamGroup> groups;
  std::vector<std::span<float>> grad_spans;
  size_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ParamGroup g;
    g.param = param.data() + offset;
    g.grad = grad.data() + offset;
    g.m = m.data() + offset;
    g.v = v.data() + offset;
    g.n = sizes[i];
    g.step = &step_counters[i];
    g.compute = {copy.data() + offset, i == 1 ? DType::kF16 : DType::kBF16};
    groups.push_back(g);
    grad_spans.emplace_back(grad.data() + offset, sizes[i]);
    offset += sizes[i];
  }
  std::vector<float> norms(steps);
  std::vector<double> lrs(steps);
  for (int s = 0; s < steps; ++s) {
    std::copy(grads.begin() + s * total_n, grads.begin() + (s + 1) * total_n, grad.begin());
    norms[s] = ClipGradNorm(grad_spans, max_norm, &pool);
    lrs[s] = schedule->Lr(s);
    (*optimizer)->Step(groups, lrs[s]);
  }

  for (int64_t counter : step_counters) EXPECT_EQ(counter, steps);
  int clipped = 0;
  for (float n : norms) clipped += n > max_norm ? 1 : 0;
  if (c.clip) {
    EXPECT_GT(clipped, 0) << "no step clipped: the test would not check clipping";
    EXPECT_LT(clipped, steps) << "every step clipped: the test would not check the unclipped path";
  } else {
    EXPECT_EQ(clipped, 0);
  }

  std::vector<double> torch_lrs = ReadFile<double>(dir + "/lrs.f64", steps);
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(lrs[s], torch_lrs[s], 1e-15 + 1e-12 * torch_lrs[s]) << "lr at step " << s;
  }
  ExpectClose("clip norms", norms, ReadFile<float>(dir + "/norms.f32", steps), 1e-6, 0);

  // Tolerances: both sides do the same float32 operations, so most elements agree to the bit;
  // the rest differ by the last bit of the clip coefficient (the norm is summed in a different
  // order) carried through the update.
  bool bitwise = !c.clip;
  ExpectClose("params", param, ReadFile<float>(dir + "/params_out.f32", total_n), 1e-6, 1e-7,
              bitwise);
  bool has_m = o.kind != OptimizerKind::kSgd || o.momentum != 0.0;
  if (has_m) {
    ExpectClose("m / momentum buffer", m, ReadFile<float>(dir + "/m_out.f32", total_n), 1e-5, 1e-6,
                bitwise);
  }
  if (o.kind != OptimizerKind::kSgd) {
    ExpectClose("v", v, ReadFile<float>(dir + "/v_out.f32", total_n), 1e-5, 1e-6, bitwise);
  }

  // The compute copies: exactly our params rounded to nearest even, and within one unit in the
  // last place of torch's own .to(bfloat16) / .to(float16) of its params.
  std::vector<uint16_t> torch_bf16 = ReadFile<uint16_t>(dir + "/params_bf16.u16", total_n);
  std::vector<uint16_t> torch_f16 = ReadFile<uint16_t>(dir + "/params_f16.u16", total_n);
  size_t same = 0;
  offset = 0;
  for (size_t gi = 0; gi < sizes.size(); ++gi) {
    bool f16 = groups[gi].compute.dtype == DType::kF16;
    for (size_t i = offset; i < offset + sizes[gi]; ++i) {
      uint16_t want = f16 ? F32ToF16(param[i]).bits : F32ToBF16(param[i]).bits;
      ASSERT_EQ(copy[i], want) << "compute copy element " << i;
      uint16_t theirs = f16 ? torch_f16[i] : torch_bf16[i];
      ASSERT_LE(std::abs(static_cast<int>(copy[i]) - static_cast<int>(theirs)), 1)
          << "compute copy element " << i;
      same += copy[i] == theirs ? 1 : 0;
    }
    offset += sizes[gi];
  }
  std::cout << "  compute copy: " << same << "/" << total_n << " equal to torch's rounding\n";
  std::string cleanup = "rm -rf '" + dir + "'";
  EXPECT_EQ(std::system(cleanup.c_str()), 0);
}

TEST(OptimizerTorchTest, AdamWMatchesTorch) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kAdamW;
  c.optimizer.weight_decay = 0.1;
  RunAgainstTorch(c);
}

TEST(OptimizerTorchTest, AdamWWithoutClippingMatchesTorchBitForBit) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kAdamW;
  c.optimizer.weight_decay = 0.1;
  c.clip = false;
  RunAgainstTorch(c);
}

TEST(OptimizerTorchTest, AdamWithL2MatchesTorch) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kAdam;
  c.optimizer.beta1 = 0.8;
  c.optimizer.beta2 = 0.95;
  c.optimizer.eps = 1e-6;
  c.optimizer.weight_decay = 0.05;
  RunAgainstTorch(c);
}

TEST(OptimizerTorchTest, SgdMomentumDampeningMatchesTorch) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.momentum = 0.9;
  c.optimizer.dampening = 0.1;
  c.optimizer.weight_decay = 0.01;
  c.lr = 0.5;
  c.min_lr = 0.05;
  RunAgainstTorch(c);
}

TEST(OptimizerTorchTest, AdamWithoutClippingMatchesTorchBitForBit) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kAdam;
  c.optimizer.weight_decay = 0.05;
  c.clip = false;
  RunAgainstTorch(c);
}

TEST(OptimizerTorchTest, SgdWithoutClippingMatchesTorchBitForBit) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.momentum = 0.9;
  c.optimizer.dampening = 0.1;
  c.optimizer.weight_decay = 0.01;
  c.lr = 0.5;
  c.min_lr = 0.05;
  c.clip = false;
  RunAgainstTorch(c);
}

TEST(OptimizerTorchTest, SgdNesterovMatchesTorch) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.optimizer.momentum = 0.9;
  c.optimizer.nesterov = true;
  c.optimizer.weight_decay = 0.01;
  c.lr = 0.5;
  c.min_lr = 0.0;
  RunAgainstTorch(c);
}

TEST(OptimizerTorchTest, PlainSgdMatchesTorch) {
  OracleCase c;
  c.optimizer.kind = OptimizerKind::kSgd;
  c.lr = 0.5;
  c.min_lr = 0.05;
  RunAgainstTorch(c);
}

}  // namespace
}  // namespace sy
