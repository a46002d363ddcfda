// Bf16Gemm (runtime/cpu/cpu_bf16_gemm.h) against a double-precision reference on random bf16
// inputs: the four transpose combinations, the tails of the micro-kernel's tile in m, n and k (odd
// k included), strides past the minimum, alpha and beta, beta = 0 over NaN, k = 0, empty shapes,
// the chunked path of large operands, and results that do not depend on the thread count.
//
// Tolerance. A bf16 has 8 significant bits, so the product of two has at most 16 and is exact in
// f32: the only rounding is the f32 summation of the k products (then alpha, and beta * c).
// Summing k terms in f32 errs by at most about k * 2^-24 * sum |terms|, so each element is held to
//   |c - ref| <= (k + 4) * 2^-24 * (|alpha| * sum_k |a[i][k] b[k][j]| + |beta * c0[i][j]|),
// the 4 covering the scaling by alpha, the addition of beta * c and the additions of the partial
// sums of K blocks into c. Where the values are small integers every partial sum is an integer
// below 2^24, so the f32 result is exact and the test asks for equality (ExactOnSmallIntegers,
// LargeOperandsGoInChunks).
//
// The dot-product cases skip where the CPU has no AVX512-BF16 (or SY_CPU_BF16_DOT=0).
#include "runtime/cpu/cpu_bf16_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/thread_pool.h"

namespace sy::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

constexpr const char* kNoBf16Dot =
    "no AVX512-BF16 on this CPU (or SY_CPU_BF16_DOT=0): Bf16Gemm was not run";

// One product: op(a) [m, k] times op(b) [k, n] into c [m, n], each stored with a stride past its
// minimum; what lies past the columns of a row must be neither read (a, b) nor written (c).
struct Case {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  bool nan_c = false;     // c starts as NaN (with beta = 0 it must not be read)
  bool integers = false;  // values in [-4, 4]: exact sums, compared for equality
  int64_t sample = 0;     // > 0: check only this many rows and columns (and every element of them)
  uint64_t seed = 1;

  std::string Name() const {
    return "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
           (trans_a ? " trans_a" : "") + (trans_b ? " trans_b" : "") + " alpha " +
           std::to_string(alpha) + " beta " + std::to_string(beta);
  }
};

struct Operands {
  int64_t lda = 0, ldb = 0, ldc = 0;
  std::vector<BF16> a, b;
  std::vector<float> c0;  // c before the product
};

Operands MakeOperands(const Case& t) {
  Operands o;
  const int64_t a_rows = t.trans_a ? t.k : t.m, a_cols = t.trans_a ? t.m : t.k;
  const int64_t b_rows = t.trans_b ? t.n : t.k, b_cols = t.trans_b ? t.k : t.n;
  o.lda = a_cols + 3;
  o.ldb = b_cols + 5;
  o.ldc = t.n + 2;
  std::mt19937_64 rng(t.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-4, 4);
  auto value = [&] { return F32ToBF16(t.integers ? static_cast<float>(small(rng)) : normal(rng)); };
  // The stride's padding holds NaN: a product that read it would be NaN, even times zero.
  o.a.assign(static_cast<size_t>(a_rows * o.lda), F32ToBF16(kNaN));
  o.b.assign(static_cast<size_t>(b_rows * o.ldb), F32ToBF16(kNaN));
  for (int64_t r = 0; r < a_rows; ++r) {
    for (int64_t i = 0; i < a_cols; ++i) o.a[static_cast<size_t>(r * o.lda + i)] = value();
  }
  for (int64_t r = 0; r < b_rows; ++r) {
    for (int64_t i = 0; i < b_cols; ++i) o.b[static_cast<size_t>(r * o.ldb + i)] = value();
  }
  o.c0.resize(static_cast<size_t>(t.m * o.ldc));
  for (float& x : o.c0) x = t.nan_c ? kNaN : normal(rng);
  return o;
}

float A(const Case& t, const Operands& o, int64_t i, int64_t p) {
  return BF16ToF32(o.a[static_cast<size_t>(t.trans_a ? p * o.lda + i : i * o.lda + p)]);
}
float B(const Case& t, const Operands& o, int64_t p, int64_t j) {
  return BF16ToF32(o.b[static_cast<size_t>(t.trans_b ? j * o.ldb + p : p * o.ldb + j)]);
}

// Rows (or columns) to check: all of them, or `sample` spread over [0, count) with the first and
// the last.
std::vector<int64_t> Checked(int64_t count, int64_t sample) {
  std::vector<int64_t> out;
  if (sample <= 0 || sample >= count) {
    for (int64_t i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  for (int64_t s = 0; s < sample; ++s) out.push_back(s * (count - 1) / (sample - 1));
  return out;
}

std::vector<float> Multiply(ThreadPool& pool, const Case& t, const Operands& o) {
  std::vector<float> c = o.c0;
  Bf16Gemm(pool, {.m = t.m,
                  .n = t.n,
                  .k = t.k,
                  .a = o.a.data(),
                  .lda = o.lda,
                  .trans_a = t.trans_a,
                  .b = o.b.data(),
                  .ldb = o.ldb,
                  .trans_b = t.trans_b,
                  .alpha = t.alpha,
                  .beta = t.beta,
                  .c = c.data(),
                  .ldc = o.ldc});
  return c;
}

// Element (i, j) against the double reference; also that the padding of c's rows is untouched.
void ExpectElement(const Case& t, const Operands& o, const std::vector<float>& c, int64_t i,
                   int64_t j, int* failures) {
  double sum = 0.0, magnitude = 0.0;
  for (int64_t p = 0; p < t.k; ++p) {
    const double product = static_cast<double>(A(t, o, i, p)) * B(t, o, p, j);
    sum += product;
    magnitude += std::fabs(product);
  }
  const size_t at = static_cast<size_t>(i * o.ldc + j);
  const double c0 = t.beta == 0.0f ? 0.0 : static_cast<double>(t.beta) * o.c0[at];
  const double want = t.alpha * sum + c0;
  const double tolerance = t.integers ? 0.0
                                      : (static_cast<double>(t.k) + 4) * std::ldexp(1.0, -24) *
                                            (std::fabs(t.alpha) * magnitude + std::fabs(c0));
  const double got = c[at];
  if (!(std::fabs(got - want) <= tolerance) && ++*failures <= 5) {
    ADD_FAILURE() << t.Name() << ": c[" << i << "][" << j << "] = " << got << ", want " << want
                  << " within " << tolerance;
  }
}

void Check(ThreadPool& pool, const Case& t) {
  const Operands o = MakeOperands(t);
  const std::vector<float> c = Multiply(pool, t, o);
  int failures = 0;
  const std::vector<int64_t> rows = Checked(t.m, t.sample), cols = Checked(t.n, t.sample);
  for (int64_t i : rows) {
    for (int64_t j = 0; j < t.n; ++j) ExpectElement(t, o, c, i, j, &failures);
  }
  if (t.sample > 0) {
    for (int64_t j : cols) {
      for (int64_t i = 0; i < t.m; ++i) ExpectElement(t, o, c, i, j, &failures);
    }
  }
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = t.n; j < o.ldc; ++j) {
      const size_t at = static_cast<size_t>(i * o.ldc + j);
      const bool same = std::isnan(o.c0[at]) ? std::isnan(c[at]) : c[at] == o.c0[at];
      if (!same && ++failures <= 5) {
        ADD_FAILURE() << t.Name() << ": c[" << i << "][" << j << "] past n was written";
      }
    }
  }
  EXPECT_EQ(failures, 0) << t.Name();
}

TEST(Bf16DotProducts, TestingSwitchTurnsThePathOffAndBack) {
  const bool by_default = Bf16DotProducts();
  SetBf16DotProductsForTesting(false);
  EXPECT_FALSE(Bf16DotProducts());
  SetBf16DotProductsForTesting(true);
  EXPECT_EQ(Bf16DotProducts(), by_default);
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx512bf16")) {
    EXPECT_FALSE(by_default);
  }
#else
  EXPECT_FALSE(by_default);
#endif
}

using Bf16GemmDeathTest = testing::Test;

TEST_F(Bf16GemmDeathTest, AbortsWhenThePathIsOff) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  ThreadPool pool(1);
  std::vector<BF16> a(4), b(4);
  std::vector<float> c(4);
  SetBf16DotProductsForTesting(false);
  EXPECT_DEATH(Bf16Gemm(pool, {.m = 2,
                               .n = 2,
                               .k = 2,
                               .a = a.data(),
                               .lda = 2,
                               .b = b.data(),
                               .ldb = 2,
                               .c = c.data(),
                               .ldc = 2}),
               "AVX512-BF16");
  SetBf16DotProductsForTesting(true);
}

TEST(Bf16Gemm, TailsOfEveryDimensionAllTransposes) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  const int64_t dims[] = {1, 2, 15, 17, 31, 33, 63, 65, 100, 257};
  const int64_t ks[] = {1, 2, 3, 15, 17, 31, 33, 63, 65, 100, 257, 513, 1100};
  uint64_t seed = 1;
  for (int transposes = 0; transposes < 4; ++transposes) {
    for (size_t i = 0; i < std::size(dims); ++i) {
      for (size_t j = 0; j < std::size(dims); ++j) {
        Case t;
        t.m = dims[i];
        t.n = dims[j];
        t.k = ks[(i + j + static_cast<size_t>(transposes)) % std::size(ks)];
        t.trans_a = (transposes & 1) != 0;
        t.trans_b = (transposes & 2) != 0;
        t.seed = seed++;
        Check(pool, t);
      }
    }
  }
}

TEST(Bf16Gemm, EveryKWithTheTileTails) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  uint64_t seed = 100;
  for (int64_t k = 1; k <= 70; ++k) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      Check(pool, {.m = 13,
                   .n = 33,
                   .k = k,
                   .trans_a = (transposes & 1) != 0,
                   .trans_b = (transposes & 2) != 0,
                   .seed = seed++});
    }
  }
}

TEST(Bf16Gemm, AlphaAndBeta) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  uint64_t seed = 1000;
  for (int transposes = 0; transposes < 4; ++transposes) {
    const bool ta = (transposes & 1) != 0, tb = (transposes & 2) != 0;
    Check(pool, {.m = 257,
                 .n = 100,
                 .k = 519,
                 .trans_a = ta,
                 .trans_b = tb,
                 .alpha = 0.5f,
                 .beta = -1.5f,
                 .seed = seed++});
    Check(pool, {.m = 130,
                 .n = 257,
                 .k = 1000,
                 .trans_a = ta,
                 .trans_b = tb,
                 .alpha = 2.0f,
                 .beta = 1.0f,
                 .seed = seed++});
    Check(pool, {.m = 33,
                 .n = 65,
                 .k = 17,
                 .trans_a = ta,
                 .trans_b = tb,
                 .alpha = -1.0f,
                 .beta = 0.25f,
                 .seed = seed++});
    // beta == 0: c is not read, so NaN there does not reach the result.
    Check(pool, {.m = 65,
                 .n = 63,
                 .k = 31,
                 .trans_a = ta,
                 .trans_b = tb,
                 .alpha = 3.0f,
                 .beta = 0.0f,
                 .nan_c = true,
                 .seed = seed++});
    Check(pool, {.m = 100,
                 .n = 17,
                 .k = 600,
                 .trans_a = ta,
                 .trans_b = tb,
                 .beta = 0.0f,
                 .nan_c = true,
                 .seed = seed++});
  }
}

TEST(Bf16Gemm, ZeroKScalesC) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  for (float beta : {0.0f, 0.5f, 1.0f}) {
    for (bool nan_c : {false, true}) {
      if (nan_c && beta != 0.0f) continue;
      Check(pool, {.m = 17, .n = 33, .k = 0, .alpha = 2.0f, .beta = beta, .nan_c = nan_c});
    }
  }
}

TEST(Bf16Gemm, EmptyShapesTouchNothing) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  std::vector<BF16> a(64), b(64);
  std::vector<float> c(64, kNaN);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{0, 5}, {5, 0}, {0, 0}}) {
    Bf16Gemm(pool, {.m = m,
                    .n = n,
                    .k = 7,
                    .a = a.data(),
                    .lda = 7,
                    .b = b.data(),
                    .ldb = 8,
                    .c = c.data(),
                    .ldc = 8});
  }
  for (float x : c) EXPECT_TRUE(std::isnan(x));
}

TEST(Bf16Gemm, ExactOnSmallIntegers) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  uint64_t seed = 2000;
  for (int transposes = 0; transposes < 4; ++transposes) {
    Check(pool, {.m = 97,
                 .n = 131,
                 .k = 1537,
                 .trans_a = (transposes & 1) != 0,
                 .trans_b = (transposes & 2) != 0,
                 .integers = true,
                 .seed = seed++});
  }
}

// The training shapes (hidden 512, expert width 1024), each element of a sample of rows and
// columns checked.
TEST(Bf16Gemm, TrainingShapes) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  Check(pool, {.m = 1024, .n = 512, .k = 512, .trans_b = true, .sample = 24});
  Check(pool, {.m = 256, .n = 1024, .k = 512, .trans_b = true, .sample = 24});
  Check(pool, {.m = 1024, .n = 512, .k = 1024, .sample = 24});
  Check(pool, {.m = 1024, .n = 512, .k = 1024, .trans_a = true, .sample = 24});
}

// Packed operands are limited to 8 MiB each: with k = 65537 a panel of b is 4 MiB and one of a
// 1.5 MiB, so 75 x 70 runs in chunks of rows and of columns (with tails in both).
TEST(Bf16Gemm, LargeOperandsGoInChunks) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  ThreadPool pool(2);
  uint64_t seed = 3000;
  for (int transposes = 0; transposes < 4; ++transposes) {
    Check(pool, {.m = 75,
                 .n = 70,
                 .k = 65537,
                 .trans_a = (transposes & 1) != 0,
                 .trans_b = (transposes & 2) != 0,
                 .integers = true,
                 .sample = 6,
                 .seed = seed++});
  }
}

// Each element is summed in the same order whichever thread computes it.
TEST(Bf16Gemm, ResultDoesNotDependOnThreadCount) {
  if (!Bf16DotProducts()) GTEST_SKIP() << kNoBf16Dot;
  const Case t{.m = 301, .n = 517, .k = 777, .trans_b = true, .alpha = 0.75f, .beta = 0.5f};
  const Operands o = MakeOperands(t);
  ThreadPool one(1), two(2), three(3);
  const std::vector<float> c1 = Multiply(one, t, o), c2 = Multiply(two, t, o),
                           c3 = Multiply(three, t, o);
  EXPECT_TRUE(c1 == c2);
  EXPECT_TRUE(c1 == c3);
}

}  // namespace
}  // namespace sy::cpu
