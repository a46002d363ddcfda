// The vectorised update kernels against their scalar references (bit for bit), and the first
// Adam/AdamW/SGD step against closed forms computed independently in double.
#include "optim/update_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "optim/optimizer_options.h"

namespace sy {
namespace {

std::vector<float> RandomVector(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> RandomPositive(size_t n, float scale, uint64_t seed) {
  std::vector<float> v = RandomVector(n, scale, seed);
  for (float& x : v) x = x * x;
  return v;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(AdamUpdateTest, VectorisedMatchesReferenceBitForBit) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam}) {
    for (double wd : {0.0, 0.1}) {
      for (size_t n : {1u, 7u, 8u, 9u, 63u, 1000u, 4099u}) {
        OptimizerOptions o;
        o.kind = kind;
        o.weight_decay = wd;
        AdamStepScalars s = MakeAdamStepScalars(o, 1e-3, 3);
        std::vector<float> p = RandomVector(n, 1.0f, 1), g = RandomVector(n, 0.01f, 2);
        std::vector<float> m = RandomVector(n, 0.01f, 3), v = RandomPositive(n, 0.01f, 4);
        std::vector<float> p2 = p, m2 = m, v2 = v;
        AdamUpdate(s, p.data(), g.data(), m.data(), v.data(), n);
        AdamUpdateReference(s, p2.data(), g.data(), m2.data(), v2.data(), n);
        EXPECT_TRUE(BitEqual(p, p2)) << OptimizerKindName(kind) << " wd " << wd << " n " << n;
        EXPECT_TRUE(BitEqual(m, m2)) << OptimizerKindName(kind) << " wd " << wd << " n " << n;
        EXPECT_TRUE(BitEqual(v, v2)) << OptimizerKindName(kind) << " wd " << wd << " n " << n;
      }
    }
  }
}

TEST(SgdUpdateTest, VectorisedMatchesReferenceBitForBit) {
  struct Config {
    double momentum, dampening, wd;
    bool nesterov;
  };
  for (Config c : {Config{0.0, 0.0, 0.0, false}, Config{0.9, 0.1, 0.01, false},
                   Config{0.9, 0.0, 0.01, true}, Config{0.5, 0.0, 0.0, false}}) {
    for (int64_t step : {1, 2}) {
      for (size_t n : {1u, 8u, 13u, 1031u}) {
        OptimizerOptions o;
        o.kind = OptimizerKind::kSgd;
        o.momentum = c.momentum;
        o.dampening = c.dampening;
        o.weight_decay = c.wd;
        o.nesterov = c.nesterov;
        SgdStepScalars s = MakeSgdStepScalars(o, 0.05, step);
        std::vector<float> p = RandomVector(n, 1.0f, 5), g = RandomVector(n, 0.1f, 6);
        std::vector<float> b = RandomVector(n, 0.1f, 7);
        std::vector<float> p2 = p, b2 = b;
        SgdUpdate(s, p.data(), g.data(), b.data(), n);
        SgdUpdateReference(s, p2.data(), g.data(), b2.data(), n);
        EXPECT_TRUE(BitEqual(p, p2)) << "momentum " << c.momentum << " step " << step;
        EXPECT_TRUE(BitEqual(b, b2)) << "momentum " << c.momentum << " step " << step;
      }
    }
  }
}

// Relative error of a float result against a double closed form.
double RelErr(float got, double want) {
  return std::abs(static_cast<double>(got) - want) / std::max(std::abs(want), 1e-30);
}

TEST(AdamUpdateTest, StepsMatchClosedFormInDouble) {
  // Independent of torch: the Adam recurrences written out in double precision.
  const size_t n = 257;
  const double lr = 2e-3, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.05;
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam}) {
    OptimizerOptions o;
    o.kind = kind;
    o.beta1 = b1;
    o.beta2 = b2;
    o.eps = eps;
    o.weight_decay = wd;
    std::vector<float> p = RandomVector(n, 1.0f, 11);
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
    for (int64_t t = 1; t <= 3; ++t) {
      std::vector<float> g = RandomVector(n, 0.01f, 100 + t);
      AdamUpdate(MakeAdamStepScalars(o, lr, t), p.data(), g.data(), m.data(), v.data(), n);
      for (size_t i = 0; i < n; ++i) {
        double gi = g[i];
        if (kind == OptimizerKind::kAdam) gi += wd * pd[i];
        if (kind == OptimizerKind::kAdamW) pd[i] -= lr * wd * pd[i];
        md[i] = b1 * md[i] + (1 - b1) * gi;
        vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
        double mhat = md[i] / (1 - std::pow(b1, t));
        double denom = std::sqrt(vd[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
        pd[i] -= lr * mhat / denom;
      }
    }
    double worst_p = 0, worst_m = 0, worst_v = 0;
    for (size_t i = 0; i < n; ++i) {
      worst_p = std::max(worst_p, RelErr(p[i], pd[i]));
      worst_m = std::max(worst_m, std::abs(m[i] - md[i]) / 0.01);  // m is O(0.01)
      worst_v = std::max(worst_v, RelErr(v[i], vd[i]));
    }
    // float32 rounding of a few operations per step: a few ulps (1 ulp = 6e-8).
    EXPECT_LT(worst_p, 1e-6) << OptimizerKindName(kind);
    EXPECT_LT(worst_m, 1e-6) << OptimizerKindName(kind);
    EXPECT_LT(worst_v, 1e-5) << OptimizerKindName(kind);
  }
}

TEST(AdamUpdateTest, FirstStepMovesEveryParamByLr) {
  // With bias correction the first Adam step is -lr * g / (|g| + eps): |delta| = lr for |g| >> eps.
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  const size_t n = 100;
  std::vector<float> p(n, 1.0f), m(n, 0.0f), v(n, 0.0f);
  std::vector<float> g = RandomVector(n, 1.0f, 21);
  AdamUpdate(MakeAdamStepScalars(o, 0.01, 1), p.data(), g.data(), m.data(), v.data(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], g[i] > 0 ? 0.99f : 1.01f, 1e-6) << i;
  }
}

TEST(SgdUpdateTest, MomentumMatchesClosedForm) {
  // torch.optim.SGD: buf_1 = d_1, buf_t = mu * buf + (1 - dampening) * d_t; p -= lr * buf (or
  // lr * (d + mu * buf) with Nesterov).
  for (bool nesterov : {false, true}) {
    OptimizerOptions o;
    o.kind = OptimizerKind::kSgd;
    o.momentum = 0.9;
    o.dampening = nesterov ? 0.0 : 0.25;
    o.weight_decay = 0.01;
    o.nesterov = nesterov;
    const size_t n = 33;
    const double lr = 0.1;
    std::vector<float> p = RandomVector(n, 1.0f, 31), buf(n, 123.0f);  // garbage: step 1 ignores it
    std::vector<double> pd(p.begin(), p.end()), bd(n, 0.0);
    for (int64_t t = 1; t <= 4; ++t) {
      std::vector<float> g = RandomVector(n, 0.1f, 200 + t);
      SgdUpdate(MakeSgdStepScalars(o, lr, t), p.data(), g.data(), buf.data(), n);
      for (size_t i = 0; i < n; ++i) {
        double d = g[i] + o.weight_decay * pd[i];
        bd[i] = t == 1 ? d : o.momentum * bd[i] + (1 - o.dampening) * d;
        pd[i] -= lr * (nesterov ? d + o.momentum * bd[i] : bd[i]);
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_LT(RelErr(p[i], pd[i]), 1e-6) << "nesterov " << nesterov << " i " << i;
      EXPECT_LT(std::abs(buf[i] - bd[i]), 1e-6) << "nesterov " << nesterov << " i " << i;
    }
  }
}

}  // namespace
}  // namespace sy
