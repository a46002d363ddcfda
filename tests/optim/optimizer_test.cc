// Optimizer (CreateOptimizer, ParamGroup, Step): option validation, per-group step counters,
// results independent of threads and chunking, and the bf16/f16 compute copy.
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "optim/update_kernels.h"

namespace sy {
namespace {

std::vector<float> RandomVector(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The buffers of one group, owned by the test as the trainer would own them.
struct Buffers {
  std::vector<float> param, grad, m, v;
  std::vector<uint16_t> copy;
  int64_t step = 0;

  Buffers(size_t n, uint64_t seed)
      : param(RandomVector(n, 1.0f, seed)),
        grad(RandomVector(n, 0.01f, seed + 1)),
        m(n, 0.0f),
        v(n, 0.0f),
        copy(n, 0) {}

  ParamGroup Group(DType copy_dtype, bool with_copy = true) {
    ParamGroup g;
    g.param = param.data();
    g.grad = grad.data();
    g.m = m.data();
    g.v = v.data();
    g.n = param.size();
    g.step = &step;
    if (with_copy) g.compute = {copy.data(), copy_dtype};
    return g;
  }
};

TEST(OptimizerOptionsTest, RejectsBadFieldsByName) {
  struct Case {
    void (*mutate)(OptimizerOptions&);
    const char* field;
  };
  const Case cases[] = {
      {[](OptimizerOptions& o) { o.beta1 = 1.0; }, "beta1"},
      {[](OptimizerOptions& o) { o.beta2 = -0.1; }, "beta2"},
      {[](OptimizerOptions& o) { o.eps = -1.0; }, "eps"},
      {[](OptimizerOptions& o) { o.weight_decay = std::nan(""); }, "weight_decay"},
      {[](OptimizerOptions& o) { o.momentum = -0.5; }, "momentum"},
      {[](OptimizerOptions& o) { o.dampening = 1.5; }, "dampening"},
      {[](OptimizerOptions& o) { o.nesterov = true; }, "nesterov"},
      {[](OptimizerOptions& o) { o.chunk_elems = 0; }, "chunk_elems"},
  };
  for (const Case& c : cases) {
    OptimizerOptions o;
    c.mutate(o);
    auto created = CreateOptimizer(o, nullptr);
    ASSERT_FALSE(created.ok()) << c.field;
    EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(created.status().message().find(c.field), std::string::npos)
        << created.status().message();
  }
  EXPECT_TRUE(CreateOptimizer(OptimizerOptions{}, nullptr).ok());
}

TEST(OptimizerOptionsTest, ParsesKindNames) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    auto parsed = ParseOptimizerKind(OptimizerKindName(kind));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, kind);
  }
  auto bad = ParseOptimizerKind("lamb");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("adamw"), std::string::npos);
}

TEST(OptimizerTest, ResultsDoNotDependOnThreadsOrChunking) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    OptimizerOptions serial_opts;
    serial_opts.kind = kind;
    serial_opts.weight_decay = 0.1;
    serial_opts.momentum = kind == OptimizerKind::kSgd ? 0.9 : 0.0;
    OptimizerOptions parallel_opts = serial_opts;
    parallel_opts.chunk_elems = 1000;  // many chunks per group
    ThreadPool pool(4);
    auto serial = CreateOptimizer(serial_opts, nullptr);
    auto parallel = CreateOptimizer(parallel_opts, &pool);
    ASSERT_TRUE(serial.ok() && parallel.ok());

    const size_t sizes[] = {50001, 3, 12345};
    std::vector<Buffers> a, b;
    for (size_t i = 0; i < 3; ++i) {
      a.emplace_back(sizes[i], 10 * i);
      b.emplace_back(sizes[i], 10 * i);
    }
    for (int s = 0; s < 3; ++s) {
      std::vector<ParamGroup> ga, gb;
      for (size_t i = 0; i < 3; ++i) {
        ga.push_back(a[i].Group(DType::kBF16));
        gb.push_back(b[i].Group(DType::kBF16));
      }
      (*serial)->Step(ga, 1e-2);
      (*parallel)->Step(gb, 1e-2);
    }
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(a[i].step, 3);
      EXPECT_EQ(b[i].step, 3);
      EXPECT_EQ(0, std::memcmp(a[i].param.data(), b[i].param.data(), sizes[i] * 4))
          << OptimizerKindName(kind) << " group " << i;
      EXPECT_EQ(0, std::memcmp(a[i].m.data(), b[i].m.data(), sizes[i] * 4));
      EXPECT_EQ(0, std::memcmp(a[i].v.data(), b[i].v.data(), sizes[i] * 4));
      EXPECT_EQ(a[i].copy, b[i].copy);
    }
  }
}

TEST(OptimizerTest, ComputeCopyIsTheRoundedUpdatedParam) {
  OptimizerOptions o;
  o.chunk_elems = 5000;  // chunk and copy-block edges fall inside the buffer
  ThreadPool pool(2);
  auto opt = CreateOptimizer(o, &pool);
  ASSERT_TRUE(opt.ok());
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Buffers buf(20011, 77);
    ParamGroup g = buf.Group(dtype);
    (*opt)->Step({&g, 1}, 1e-3);
    for (size_t i = 0; i < buf.param.size(); ++i) {
      uint16_t want =
          dtype == DType::kBF16 ? F32ToBF16(buf.param[i]).bits : F32ToF16(buf.param[i]).bits;
      ASSERT_EQ(buf.copy[i], want) << DTypeName(dtype) << " element " << i;
    }
  }
}

TEST(OptimizerTest, EachGroupUsesItsOwnStepCounter) {
  // An expert that was skipped on earlier steps has a smaller counter, hence a larger bias
  // correction: its update must equal the kernel run with its own step number.
  OptimizerOptions o;
  o.weight_decay = 0.01;
  auto opt = CreateOptimizer(o, nullptr);
  ASSERT_TRUE(opt.ok());
  Buffers fresh(100, 1), old(100, 1);
  old.step = 41;
  std::vector<float> want_p = old.param, want_m = old.m, want_v = old.v;
  AdamUpdateReference(MakeAdamStepScalars(o, 1e-3, 42), want_p.data(), old.grad.data(),
                      want_m.data(), want_v.data(), 100);
  ParamGroup groups[] = {fresh.Group(DType::kBF16, false), old.Group(DType::kBF16, false)};
  (*opt)->Step(groups, 1e-3);
  EXPECT_EQ(fresh.step, 1);
  EXPECT_EQ(old.step, 42);
  EXPECT_EQ(old.param, want_p);
  EXPECT_EQ(old.m, want_m);
  EXPECT_EQ(old.v, want_v);
  EXPECT_NE(fresh.param, old.param);  // same data, different step: different update
}

TEST(OptimizerTest, SgdWithoutMomentumNeedsNoState) {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  auto opt = CreateOptimizer(o, nullptr);
  ASSERT_TRUE(opt.ok());
  EXPECT_FALSE((*opt)->NeedsFirstMoment());
  EXPECT_FALSE((*opt)->NeedsSecondMoment());
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 0.25f};
  int64_t step = 0;
  ParamGroup group{p.data(), g.data(), nullptr, nullptr, 2, &step, {}};
  (*opt)->Step({&group, 1}, 0.5);
  EXPECT_EQ(p, (std::vector<float>{0.75f, -2.125f}));
}

TEST(OptimizerDeathTest, MissingStateBufferIsABrokenInvariant) {
  auto opt = CreateOptimizer(OptimizerOptions{}, nullptr);
  ASSERT_TRUE(opt.ok());
  Buffers buf(10, 3);
  ParamGroup g = buf.Group(DType::kBF16, false);
  g.v = nullptr;
  EXPECT_DEATH((*opt)->Step({&g, 1}, 1e-3), "no v buffer");
  ParamGroup bad_copy = buf.Group(DType::kF32);
  EXPECT_DEATH((*opt)->Step({&bad_copy, 1}, 1e-3), "bf16 or f16");
}

}  // namespace
}  // namespace sy
