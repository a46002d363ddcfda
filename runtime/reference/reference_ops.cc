#include "runtime/reference/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/core/check.h"

namespace sy::reference {
namespace {

void CheckSize(ConstValues v, int64_t expected, const char* what) {
  SY_CHECK_EQ(static_cast<int64_t>(v.size()), expected) << "reference: " << what;
}

// Rounds x to a binary format with `precision` significand bits (implicit bit included), normal
// exponents down to `min_exponent`, and largest finite value `max_finite`.
double RoundToFormat(double x, int precision, int min_exponent, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0) return x;
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = f * 2^e, f in [0.5, 1): leading bit at 2^(e-1)
  const int lead = std::max(e - 1, min_exponent);
  const double quantum = std::ldexp(1.0, lead - (precision - 1));
  // x / quantum is exact (a power-of-two scaling); nearbyint rounds half to even.
  const double rounded = std::nearbyint(x / quantum) * quantum;
  if (std::fabs(rounded) > max_finite)
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  return rounded;
}

}  // namespace

double RoundToF32(double x) {
  return RoundToFormat(x, 24, -126, std::ldexp(2.0 - std::ldexp(1.0, -23), 127));
}
double RoundToBF16(double x) {
  return RoundToFormat(x, 8, -126, std::ldexp(2.0 - std::ldexp(1.0, -7), 127));
}
double RoundToF16(double x) {
  return RoundToFormat(x, 11, -14, std::ldexp(2.0 - std::ldexp(1.0, -10), 15));
}

double RoundTo(DType dtype, double x) {
  switch (dtype) {
    case DType::kF32:
      return RoundToF32(x);
    case DType::kBF16:
      return RoundToBF16(x);
    case DType::kF16:
      return RoundToF16(x);
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kI8:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kF64:
      break;
  }
  SY_CHECK(false) << "reference::RoundTo: " << DTypeName(dtype) << " is not a float format";
  return x;
}

// ---- GEMM ----

Values Gemm(int64_t m, int64_t n, int64_t k, ConstValues a, ConstValues b, ConstValues c,
            const GemmOptions& options) {
  CheckSize(a, m * k, "Gemm a");
  CheckSize(b, k * n, "Gemm b");
  CheckSize(c, m * n, "Gemm c");
  Values out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        double av = options.trans_a ? a[p * m + i] : a[i * k + p];
        double bv = options.trans_b ? b[j * k + p] : b[p * n + j];
        sum += av * bv;
      }
      double prior = options.beta == 0.0f ? 0.0 : options.beta * c[i * n + j];
      out[i * n + j] = options.alpha * sum + prior;
    }
  }
  return out;
}

Values BatchedGemm(int64_t batch, int64_t m, int64_t n, int64_t k, ConstValues a, ConstValues b,
                   ConstValues c, const GemmOptions& options) {
  CheckSize(a, batch * m * k, "BatchedGemm a");
  CheckSize(b, batch * k * n, "BatchedGemm b");
  CheckSize(c, batch * m * n, "BatchedGemm c");
  Values out;
  for (int64_t i = 0; i < batch; ++i) {
    Values ci = Gemm(m, n, k, a.subspan(i * m * k, m * k), b.subspan(i * k * n, k * n),
                     c.subspan(i * m * n, m * n), options);
    out.insert(out.end(), ci.begin(), ci.end());
  }
  return out;
}

Values GroupedGemm(std::span<const int64_t> group_rows, int64_t n, int64_t k, ConstValues a,
                   ConstValues b, ConstValues c, const GemmOptions& options) {
  SY_CHECK(!options.trans_a) << "reference GroupedGemm: trans_a must be false";
  int64_t rows = std::accumulate(group_rows.begin(), group_rows.end(), int64_t{0});
  const int64_t groups = static_cast<int64_t>(group_rows.size());
  CheckSize(a, rows * k, "GroupedGemm a");
  CheckSize(b, groups * k * n, "GroupedGemm b");
  CheckSize(c, rows * n, "GroupedGemm c");
  Values out;
  int64_t row = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t r = group_rows[g];
    Values cg = Gemm(r, n, k, a.subspan(row * k, r * k), b.subspan(g * k * n, k * n),
                     c.subspan(row * n, r * n), options);
    out.insert(out.end(), cg.begin(), cg.end());
    row += r;
  }
  return out;
}

Values GroupedGemmWeightGrad(std::span<const int64_t> group_rows, int64_t n, int64_t k,
                             ConstValues x, ConstValues dy, ConstValues dw, double beta) {
  int64_t rows = std::accumulate(group_rows.begin(), group_rows.end(), int64_t{0});
  const int64_t groups = static_cast<int64_t>(group_rows.size());
  CheckSize(x, rows * k, "GroupedGemmWeightGrad x");
  CheckSize(dy, rows * n, "GroupedGemmWeightGrad dy");
  CheckSize(dw, groups * n * k, "GroupedGemmWeightGrad dw");
  Values out(dw.size());
  int64_t row0 = 0;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        double sum = 0.0;
        for (int64_t r = row0; r < row0 + group_rows[g]; ++r) sum += dy[r * n + i] * x[r * k + j];
        const int64_t at = (g * n + i) * k + j;
        out[at] = sum + (beta == 0.0 ? 0.0 : beta * dw[at]);
      }
    }
    row0 += group_rows[g];
  }
  return out;
}

// ---- elementwise ----

namespace {
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double NormalCdf(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }
double NormalPdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }

template <typename Fn>
Values Map(ConstValues x, Fn fn) {
  Values out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = fn(x[i]);
  return out;
}
template <typename Fn>
Values Map2(ConstValues a, ConstValues b, Fn fn) {
  CheckSize(b, static_cast<int64_t>(a.size()), "elementwise operands differ in size");
  Values out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = fn(a[i], b[i]);
  return out;
}
}  // namespace

Values Add(ConstValues a, ConstValues b) {
  return Map2(a, b, [](double x, double y) { return x + y; });
}
Values Mul(ConstValues a, ConstValues b) {
  return Map2(a, b, [](double x, double y) { return x * y; });
}
Values Scale(ConstValues x, double alpha) {
  return Map(x, [alpha](double v) { return alpha * v; });
}
Values Axpy(double alpha, ConstValues x, ConstValues y) {
  return Map2(x, y, [alpha](double xv, double yv) { return yv + alpha * xv; });
}

Values AddBias(int64_t rows, int64_t n, ConstValues x, ConstValues bias) {
  CheckSize(x, rows * n, "AddBias x");
  CheckSize(bias, n, "AddBias bias");
  Values out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) out[r * n + j] = x[r * n + j] + bias[j];
  }
  return out;
}

Values Silu(ConstValues x) {
  return Map(x, [](double v) { return v * Sigmoid(v); });
}
Values SiluBackward(ConstValues x, ConstValues dout) {
  return Map2(x, dout, [](double v, double d) {
    double s = Sigmoid(v);
    return d * (s + v * s * (1.0 - s));
  });
}
Values Gelu(ConstValues x) {
  return Map(x, [](double v) { return v * NormalCdf(v); });
}
Values GeluBackward(ConstValues x, ConstValues dout) {
  return Map2(x, dout, [](double v, double d) { return d * (NormalCdf(v) + v * NormalPdf(v)); });
}
Values Relu(ConstValues x) {
  return Map(x, [](double v) { return v > 0.0 ? v : 0.0; });
}
Values ReluBackward(ConstValues x, ConstValues dout) {
  return Map2(x, dout, [](double v, double d) { return v > 0.0 ? d : 0.0; });
}
Values Swiglu(ConstValues gate, ConstValues up) {
  return Map2(gate, up, [](double g, double u) { return g * Sigmoid(g) * u; });
}
SwigluGrads SwigluBackward(ConstValues gate, ConstValues up, ConstValues dout) {
  CheckSize(up, static_cast<int64_t>(gate.size()), "SwigluBackward up");
  CheckSize(dout, static_cast<int64_t>(gate.size()), "SwigluBackward dout");
  SwigluGrads grads{Values(gate.size()), Values(gate.size())};
  for (size_t i = 0; i < gate.size(); ++i) {
    double s = Sigmoid(gate[i]);
    grads.dgate[i] = dout[i] * up[i] * (s + gate[i] * s * (1.0 - s));
    grads.dup[i] = dout[i] * gate[i] * s;
  }
  return grads;
}

// ---- reductions, softmax, top-k, cross-entropy ----

Values Reduce(int64_t rows, int64_t n, ConstValues x, ReduceOp op, ReduceAxis axis) {
  CheckSize(x, rows * n, "Reduce x");
  const bool last = axis == ReduceAxis::kLast;
  SY_CHECK(last || op != ReduceOp::kMax) << "reference Reduce: kMax only over the last axis";
  const int64_t outer = last ? rows : n;
  const int64_t inner = last ? n : rows;
  Values out(static_cast<size_t>(outer));
  for (int64_t o = 0; o < outer; ++o) {
    double acc = op == ReduceOp::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t i = 0; i < inner; ++i) {
      double v = last ? x[o * n + i] : x[i * n + o];
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kMean:
          acc += v;
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case ReduceOp::kSumSquares:
          acc += v * v;
          break;
      }
    }
    out[o] = op == ReduceOp::kMean ? acc / static_cast<double>(inner) : acc;
  }
  return out;
}

Values Softmax(int64_t rows, int64_t n, ConstValues x) {
  CheckSize(x, rows * n, "Softmax x");
  Values out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) max = std::max(max, x[r * n + j]);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(x[r * n + j] - max);
    for (int64_t j = 0; j < n; ++j) out[r * n + j] = std::exp(x[r * n + j] - max) / sum;
  }
  return out;
}

Values SoftmaxBackward(int64_t rows, int64_t n, ConstValues y, ConstValues dy) {
  CheckSize(y, rows * n, "SoftmaxBackward y");
  CheckSize(dy, rows * n, "SoftmaxBackward dy");
  Values dx(y.size());
  for (int64_t r = 0; r < rows; ++r) {
    // dx_i = sum_j dy_j * dy_j/dx_i = y_i (dy_i - sum_j y_j dy_j).
    double dot = 0.0;
    for (int64_t j = 0; j < n; ++j) dot += y[r * n + j] * dy[r * n + j];
    for (int64_t i = 0; i < n; ++i) dx[r * n + i] = y[r * n + i] * (dy[r * n + i] - dot);
  }
  return dx;
}

TopKResult TopK(int64_t rows, int64_t n, ConstValues x, int k) {
  CheckSize(x, rows * n, "TopK x");
  SY_CHECK(k >= 1 && k <= n) << "reference TopK: k = " << k << ", n = " << n;
  TopKResult result;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    // A stable sort by descending value keeps equal values in ascending index order.
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return x[r * n + a] > x[r * n + b]; });
    for (int i = 0; i < k; ++i) {
      result.indices.push_back(order[static_cast<size_t>(i)]);
      result.values.push_back(x[r * n + order[static_cast<size_t>(i)]]);
    }
  }
  return result;
}

CrossEntropyResult CrossEntropy(int64_t rows, int64_t v, ConstValues logits,
                                std::span<const int32_t> targets) {
  CheckSize(logits, rows * v, "CrossEntropy logits");
  SY_CHECK_EQ(static_cast<int64_t>(targets.size()), rows) << "reference CrossEntropy targets";
  CrossEntropyResult result{Values(static_cast<size_t>(rows)), Values(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < v; ++j) max = std::max(max, logits[r * v + j]);
    double sum = 0.0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(logits[r * v + j] - max);
    const double lse = max + std::log(sum);
    result.lse[r] = lse;
    const int32_t t = targets[r];
    SY_CHECK(t == -1 || (t >= 0 && t < v)) << "reference CrossEntropy: target " << t;
    result.losses[r] = t < 0 ? 0.0 : lse - logits[r * v + t];
  }
  return result;
}

Values CrossEntropyBackward(int64_t rows, int64_t v, ConstValues logits,
                            std::span<const int32_t> targets, ConstValues lse,
                            ConstValues dlosses) {
  CheckSize(logits, rows * v, "CrossEntropyBackward logits");
  CheckSize(lse, rows, "CrossEntropyBackward lse");
  CheckSize(dlosses, rows, "CrossEntropyBackward dlosses");
  Values d(logits.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t t = targets[r];
    if (t < 0) continue;
    for (int64_t j = 0; j < v; ++j) {
      double p = std::exp(logits[r * v + j] - lse[r]);
      d[r * v + j] = dlosses[r] * (p - (j == t ? 1.0 : 0.0));
    }
  }
  return d;
}

// ---- normalisation and rotary embedding ----

RmsNormResult RmsNorm(int64_t rows, int64_t n, ConstValues x, ConstValues weight, double eps) {
  CheckSize(x, rows * n, "RmsNorm x");
  CheckSize(weight, n, "RmsNorm weight");
  RmsNormResult result{Values(x.size()), Values(static_cast<size_t>(rows))};
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (int64_t j = 0; j < n; ++j) ms += x[r * n + j] * x[r * n + j];
    ms /= static_cast<double>(n);
    const double rstd = 1.0 / std::sqrt(ms + eps);
    result.rstd[r] = rstd;
    for (int64_t j = 0; j < n; ++j) result.out[r * n + j] = x[r * n + j] * rstd * weight[j];
  }
  return result;
}

RmsNormGrads RmsNormBackward(int64_t rows, int64_t n, ConstValues x, ConstValues weight,
                             ConstValues rstd, ConstValues dout) {
  CheckSize(x, rows * n, "RmsNormBackward x");
  CheckSize(weight, n, "RmsNormBackward weight");
  CheckSize(rstd, rows, "RmsNormBackward rstd");
  CheckSize(dout, rows * n, "RmsNormBackward dout");
  RmsNormGrads grads{Values(x.size()), Values(static_cast<size_t>(n), 0.0)};
  for (int64_t r = 0; r < rows; ++r) {
    const double s = rstd[r];
    // y_j = x_j s w_j with s = (mean(x^2) + eps)^(-1/2), ds/dx_i = -s^3 x_i / n.
    double dot = 0.0;
    for (int64_t j = 0; j < n; ++j) dot += dout[r * n + j] * weight[j] * x[r * n + j];
    for (int64_t i = 0; i < n; ++i) {
      grads.dx[r * n + i] =
          dout[r * n + i] * weight[i] * s - s * s * s * x[r * n + i] * dot / static_cast<double>(n);
      grads.dweight[i] += dout[r * n + i] * x[r * n + i] * s;
    }
  }
  return grads;
}

namespace {
// Rotates each pair (i, i + r/2) of every head by sign * positions[t] * theta^(-2i/r), r the rotary
// dim (0: d); values r..d-1 pass through.
Values RotateHalf(int64_t t_len, int64_t heads, int64_t d, ConstValues x,
                  std::span<const int32_t> positions, double theta, int64_t rotary_dim,
                  double sign) {
  CheckSize(x, t_len * heads * d, "Rope x");
  SY_CHECK_EQ(static_cast<int64_t>(positions.size()), t_len) << "reference Rope positions";
  const int64_t r = rotary_dim > 0 ? rotary_dim : d;
  SY_CHECK(r % 2 == 0 && r <= d) << "reference Rope: rotary dim " << r << " of head dim " << d;
  const int64_t half = r / 2;
  Values out(x.begin(), x.end());
  for (int64_t t = 0; t < t_len; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double angle =
            sign * positions[t] *
            std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(r));
        const double c = std::cos(angle), s = std::sin(angle);
        const double x1 = x[base + i], x2 = x[base + i + half];
        out[base + i] = x1 * c - x2 * s;
        out[base + i + half] = x2 * c + x1 * s;
      }
    }
  }
  return out;
}
}  // namespace

Values Rope(int64_t t, int64_t heads, int64_t d, ConstValues x, std::span<const int32_t> positions,
            double theta, int64_t rotary_dim) {
  return RotateHalf(t, heads, d, x, positions, theta, rotary_dim, 1.0);
}

Values RopeBackward(int64_t t, int64_t heads, int64_t d, ConstValues dout,
                    std::span<const int32_t> positions, double theta, int64_t rotary_dim) {
  // The rotation is orthogonal: its transpose is the rotation by the opposite angle.
  return RotateHalf(t, heads, d, dout, positions, theta, rotary_dim, -1.0);
}

// ---- attention ----

namespace {
struct AttentionIndex {
  const AttentionShape& s;
  int64_t q(int64_t b, int64_t t, int64_t h, int64_t e) const {
    return ((b * s.q_len + t) * s.q_heads + h) * s.head_dim + e;
  }
  int64_t kv(int64_t b, int64_t j, int64_t h, int64_t e) const {
    return ((b * s.kv_len + j) * s.kv_heads + h) * s.head_dim + e;
  }
  int64_t lse(int64_t b, int64_t h, int64_t t) const { return (b * s.q_heads + h) * s.q_len + t; }
  // Position of query t of batch b: keys 0..position are visible.
  int64_t position(std::span<const int32_t> kv_lens, int64_t b, int64_t t) const {
    const int64_t len = kv_lens.empty() ? s.kv_len : kv_lens[b];
    SY_CHECK(len >= s.q_len && len <= s.kv_len) << "reference Attention: kv_len " << len;
    return len - s.q_len + t;
  }
  int64_t kv_head(int64_t h) const { return h / (s.q_heads / s.kv_heads); }
};

void CheckAttentionSizes(const AttentionShape& s, ConstValues q, ConstValues k, ConstValues v,
                         std::span<const int32_t> kv_lens) {
  SY_CHECK(s.kv_heads > 0 && s.q_heads % s.kv_heads == 0) << "reference Attention: heads";
  CheckSize(q, s.batch * s.q_len * s.q_heads * s.head_dim, "Attention q");
  CheckSize(k, s.batch * s.kv_len * s.kv_heads * s.head_dim, "Attention k");
  CheckSize(v, s.batch * s.kv_len * s.kv_heads * s.head_dim, "Attention v");
  SY_CHECK(kv_lens.empty() || static_cast<int64_t>(kv_lens.size()) == s.batch)
      << "reference Attention: kv_lens";
}

double Score(const AttentionIndex& ix, ConstValues q, ConstValues k, int64_t b, int64_t t,
             int64_t h, int64_t j, double scale) {
  double dot = 0.0;
  for (int64_t e = 0; e < ix.s.head_dim; ++e) {
    dot += q[ix.q(b, t, h, e)] * k[ix.kv(b, j, ix.kv_head(h), e)];
  }
  return scale * dot;
}
}  // namespace

AttentionResult Attention(const AttentionShape& shape, ConstValues q, ConstValues k, ConstValues v,
                          double scale, std::span<const int32_t> kv_lens) {
  CheckAttentionSizes(shape, q, k, v, kv_lens);
  const AttentionIndex ix{shape};
  AttentionResult result{Values(q.size(), 0.0),
                         Values(static_cast<size_t>(shape.batch * shape.q_heads * shape.q_len))};
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.q_heads; ++h) {
      for (int64_t t = 0; t < shape.q_len; ++t) {
        const int64_t pos = ix.position(kv_lens, b, t);
        Values scores(static_cast<size_t>(pos + 1));
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= pos; ++j) {
          scores[j] = Score(ix, q, k, b, t, h, j, scale);
          max = std::max(max, scores[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= pos; ++j) sum += std::exp(scores[j] - max);
        const double lse = max + std::log(sum);
        result.lse[ix.lse(b, h, t)] = lse;
        for (int64_t j = 0; j <= pos; ++j) {
          const double p = std::exp(scores[j] - lse);
          for (int64_t e = 0; e < shape.head_dim; ++e) {
            result.out[ix.q(b, t, h, e)] += p * v[ix.kv(b, j, ix.kv_head(h), e)];
          }
        }
      }
    }
  }
  return result;
}

AttentionGrads AttentionBackward(const AttentionShape& shape, ConstValues q, ConstValues k,
                                 ConstValues v, ConstValues out, ConstValues lse, ConstValues dout,
                                 double scale, std::span<const int32_t> kv_lens) {
  CheckAttentionSizes(shape, q, k, v, kv_lens);
  CheckSize(out, static_cast<int64_t>(q.size()), "AttentionBackward out");
  CheckSize(dout, static_cast<int64_t>(q.size()), "AttentionBackward dout");
  CheckSize(lse, shape.batch * shape.q_heads * shape.q_len, "AttentionBackward lse");
  const AttentionIndex ix{shape};
  AttentionGrads grads{Values(q.size(), 0.0), Values(k.size(), 0.0), Values(v.size(), 0.0)};
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.q_heads; ++h) {
      const int64_t hk = ix.kv_head(h);
      for (int64_t t = 0; t < shape.q_len; ++t) {
        const int64_t pos = ix.position(kv_lens, b, t);
        // out = sum_j P_j v_j with P = softmax(s): dP_j = dout . v_j, and
        // dS_j = P_j (dP_j - sum_i P_i dP_i) = P_j (dP_j - dout . out).
        double delta = 0.0;
        for (int64_t e = 0; e < shape.head_dim; ++e) {
          delta += dout[ix.q(b, t, h, e)] * out[ix.q(b, t, h, e)];
        }
        for (int64_t j = 0; j <= pos; ++j) {
          const double p = std::exp(Score(ix, q, k, b, t, h, j, scale) - lse[ix.lse(b, h, t)]);
          double dp = 0.0;
          for (int64_t e = 0; e < shape.head_dim; ++e) {
            dp += dout[ix.q(b, t, h, e)] * v[ix.kv(b, j, hk, e)];
          }
          const double ds = p * (dp - delta);
          for (int64_t e = 0; e < shape.head_dim; ++e) {
            grads.dq[ix.q(b, t, h, e)] += scale * ds * k[ix.kv(b, j, hk, e)];
            grads.dk[ix.kv(b, j, hk, e)] += scale * ds * q[ix.q(b, t, h, e)];
            grads.dv[ix.kv(b, j, hk, e)] += p * dout[ix.q(b, t, h, e)];
          }
        }
      }
    }
  }
  return grads;
}

// ---- indexing ----

Values EmbeddingGather(int64_t vocab, int64_t h, ConstValues table, std::span<const int32_t> ids) {
  CheckSize(table, vocab * h, "EmbeddingGather table");
  Values out;
  for (int32_t id : ids) {
    SY_CHECK(id >= 0 && id < vocab) << "reference EmbeddingGather: id " << id;
    for (int64_t j = 0; j < h; ++j) out.push_back(table[id * h + j]);
  }
  return out;
}

Values EmbeddingScatterAdd(int64_t vocab, int64_t h, ConstValues dout, std::span<const int32_t> ids,
                           ConstValues dtable) {
  CheckSize(dtable, vocab * h, "EmbeddingScatterAdd dtable");
  CheckSize(dout, static_cast<int64_t>(ids.size()) * h, "EmbeddingScatterAdd dout");
  Values out(dtable.begin(), dtable.end());
  for (size_t n = 0; n < ids.size(); ++n) {
    SY_CHECK(ids[n] >= 0 && ids[n] < vocab) << "reference EmbeddingScatterAdd: id " << ids[n];
    for (int64_t j = 0; j < h; ++j) out[ids[n] * h + j] += dout[n * h + j];
  }
  return out;
}

Values GatherRows(int64_t rows, int64_t h, ConstValues src, std::span<const int32_t> indices) {
  return EmbeddingGather(rows, h, src, indices);
}

Values ScatterAddRows(int64_t rows, int64_t h, ConstValues src, std::span<const int32_t> indices,
                      ConstValues weights, ConstValues out) {
  CheckSize(out, rows * h, "ScatterAddRows out");
  CheckSize(src, static_cast<int64_t>(indices.size()) * h, "ScatterAddRows src");
  SY_CHECK(weights.empty() || weights.size() == indices.size()) << "reference ScatterAddRows";
  Values result(out.begin(), out.end());
  for (size_t m = 0; m < indices.size(); ++m) {
    SY_CHECK(indices[m] >= 0 && indices[m] < rows) << "reference ScatterAddRows: " << indices[m];
    const double w = weights.empty() ? 1.0 : weights[m];
    for (int64_t j = 0; j < h; ++j) result[indices[m] * h + j] += w * src[m * h + j];
  }
  return result;
}

}  // namespace sy::reference
