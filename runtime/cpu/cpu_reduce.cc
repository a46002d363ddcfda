// Reductions, softmax, top-k and cross-entropy of the CPU backend: row-wise loops split over the
// thread pool. Softmax and log-sum-exp subtract the row maximum first, so large logits never
// overflow.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_op_util.h"
#include "runtime/cpu/cpu_vec.h"
#include "runtime/cpu/cpu_widened.h"

namespace sy {
namespace {

// Rows per task so that a task covers at least ~16K elements.
int64_t RowGrain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)); }

// log(sum(exp(x))) of one row, with `scratch` receiving exp(x - max).
float LogSumExpRow(const float* x, int64_t n, float* scratch) {
  float max = cpu::MaxRow(x, n);
  if (std::isinf(max) && max < 0) return max;  // every entry is -inf
  float sum = cpu::ExpShiftRow(x, max, scratch, n);
  return max + std::log(sum);
}

// Orders (value, index) pairs: larger value first, then lower index; NaN counts as the largest,
// as in torch.topk.
inline bool Before(float va, int32_t ia, float vb, int32_t ib) {
  bool na = std::isnan(va), nb = std::isnan(vb);
  if (na != nb) return na;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

}  // namespace

void CpuBackend::Reduce(const Tensor& x, const Tensor& out, ReduceOp op, ReduceAxis axis) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return Reduce(w.In(x), w.Out(out), op, axis);
  }
  CheckOperand(x, "Reduce");
  CheckOperand(out, "Reduce");
  cpu::CheckDType(x, DType::kF32, "Reduce", "x");
  cpu::CheckDType(out, DType::kF32, "Reduce", "out");
  SY_CHECK_GE(x.rank(), 1) << "Reduce: x " << x.ToString() << " must have rank >= 1";
  const float* px = x.data<float>();
  float* po = out.data<float>();
  if (axis == ReduceAxis::kLast) {
    const int64_t n = cpu::Cols(x, "Reduce");
    const int64_t rows = cpu::Rows(x, "Reduce");
    cpu::CheckNumel(out, rows, "Reduce", "out");
    SY_CHECK(n > 0 || op == ReduceOp::kSum || op == ReduceOp::kSumSquares)
        << "Reduce: mean or max over an empty last dimension of " << x.ToString();
    pool().ParallelFor(rows, RowGrain(n), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const float* row = px + r * n;
        switch (op) {
          case ReduceOp::kSum:
            po[r] = cpu::SumRow(row, n);
            break;
          case ReduceOp::kMean:
            po[r] = cpu::SumRow(row, n) / static_cast<float>(n);
            break;
          case ReduceOp::kMax:
            po[r] = cpu::MaxRow(row, n);
            break;
          case ReduceOp::kSumSquares:
            po[r] = cpu::SumSquaresRow(row, n);
            break;
        }
      }
    });
    return;
  }
  SY_CHECK(op != ReduceOp::kMax) << "Reduce: kMax is only supported over the last axis";
  const int64_t rows = x.dim(0);
  int64_t cols = 1;
  for (int i = 1; i < x.rank(); ++i) cols *= x.dim(i);
  cpu::CheckNumel(out, cols, "Reduce", "out");
  SY_CHECK(rows > 0 || op != ReduceOp::kMean)
      << "Reduce: mean over an empty first dimension of " << x.ToString();
  // Each task owns a range of columns and walks every row: contiguous, vectorised, race-free.
  pool().ParallelFor(cols, std::max<int64_t>(64, 16384 / std::max<int64_t>(1, rows)),
                     [&](int64_t lo, int64_t hi) {
                       float* acc = po + lo;
                       const int64_t width = hi - lo;
                       std::fill(acc, acc + width, 0.0f);
                       for (int64_t r = 0; r < rows; ++r) {
                         const float* row = px + r * cols + lo;
                         if (op == ReduceOp::kSumSquares) {
                           for (int64_t j = 0; j < width; ++j) acc[j] += row[j] * row[j];
                         } else {
                           for (int64_t j = 0; j < width; ++j) acc[j] += row[j];
                         }
                       }
                       if (op == ReduceOp::kMean) {
                         const float inv = 1.0f / static_cast<float>(rows);
                         for (int64_t j = 0; j < width; ++j) acc[j] *= inv;
                       }
                     });
}

void CpuBackend::Softmax(const Tensor& x, const Tensor& out) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return Softmax(w.In(x), w.Out(out));
  }
  CheckOperand(x, "Softmax");
  CheckOperand(out, "Softmax");
  cpu::CheckDType(x, DType::kF32, "Softmax", "x");
  cpu::CheckDType(out, DType::kF32, "Softmax", "out");
  cpu::CheckSameShape(x, out, "Softmax", "x", "out");
  const int64_t n = cpu::Cols(x, "Softmax");
  const int64_t rows = cpu::Rows(x, "Softmax");
  if (n == 0) return;
  const float* px = x.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(rows, RowGrain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* row = px + r * n;
      float* orow = po + r * n;
      float max = cpu::MaxRow(row, n);
      float sum = cpu::ExpShiftRow(row, max, orow, n);
      float inv = 1.0f / sum;
      for (int64_t j = 0; j < n; ++j) orow[j] *= inv;
    }
  });
}

void CpuBackend::SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  if (cpu::AnySixteenBit({&y, &dy, &dx})) {
    cpu::Widened w(*this);
    return SoftmaxBackward(w.In(y), w.In(dy), w.Out(dx));
  }
  for (const Tensor* t : {&y, &dy, &dx}) {
    CheckOperand(*t, "SoftmaxBackward");
    cpu::CheckDType(*t, DType::kF32, "SoftmaxBackward", "operand");
  }
  cpu::CheckSameShape(y, dy, "SoftmaxBackward", "y", "dy");
  cpu::CheckSameShape(y, dx, "SoftmaxBackward", "y", "dx");
  const int64_t n = cpu::Cols(y, "SoftmaxBackward");
  const int64_t rows = cpu::Rows(y, "SoftmaxBackward");
  const float* py = y.data<float>();
  const float* pdy = dy.data<float>();
  float* pdx = dx.data<float>();
  pool().ParallelFor(rows, RowGrain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* yr = py + r * n;
      const float* dyr = pdy + r * n;
      float* dxr = pdx + r * n;
      float dot = cpu::Dot(yr, dyr, n);
      for (int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
    }
  });
}

void CpuBackend::TopK(const Tensor& x, int k, const Tensor& values, const Tensor& indices) {
  if (cpu::AnySixteenBit({&x})) {
    cpu::Widened w(*this);
    return TopK(w.In(x), k, values, indices);
  }
  CheckOperand(x, "TopK");
  CheckOperand(values, "TopK");
  CheckOperand(indices, "TopK");
  cpu::CheckDType(x, DType::kF32, "TopK", "x");
  cpu::CheckDType(values, DType::kF32, "TopK", "values");
  cpu::CheckDType(indices, DType::kI32, "TopK", "indices");
  const int64_t n = cpu::Cols(x, "TopK");
  const int64_t rows = cpu::Rows(x, "TopK");
  SY_CHECK(k >= 1 && k <= n) << "TopK: k = " << k << " outside [1, " << n << "] for "
                             << x.ToString();
  SY_CHECK(values.numel() == rows * k && cpu::Cols(values, "TopK") == k)
      << "TopK: values " << values.ToString() << " should be [" << rows << ", " << k << "]";
  SY_CHECK(indices.numel() == rows * k && cpu::Cols(indices, "TopK") == k)
      << "TopK: indices " << indices.ToString() << " should be [" << rows << ", " << k << "]";
  SY_CHECK_LE(n, int64_t{std::numeric_limits<int32_t>::max()}) << "TopK: row too long";
  const float* px = x.data<float>();
  float* pv = values.data<float>();
  int32_t* pi = indices.data<int32_t>();
  pool().ParallelFor(rows, RowGrain(n), [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> order;
    for (int64_t r = lo; r < hi; ++r) {
      const float* row = px + r * n;
      float* vr = pv + r * k;
      int32_t* ir = pi + r * k;
      if (k <= 16) {
        // Insertion into a sorted list of the k best so far: O(N k), branch-light for router k.
        int filled = 0;
        for (int32_t j = 0; j < static_cast<int32_t>(n); ++j) {
          float v = row[j];
          if (filled == k && !Before(v, j, vr[k - 1], ir[k - 1])) continue;
          int pos = filled < k ? filled++ : k - 1;
          while (pos > 0 && Before(v, j, vr[pos - 1], ir[pos - 1])) {
            vr[pos] = vr[pos - 1];
            ir[pos] = ir[pos - 1];
            --pos;
          }
          vr[pos] = v;
          ir[pos] = j;
        }
      } else {
        order.resize(static_cast<size_t>(n));
        for (int32_t j = 0; j < static_cast<int32_t>(n); ++j) order[static_cast<size_t>(j)] = j;
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [row](int32_t a, int32_t b) { return Before(row[a], a, row[b], b); });
        for (int i = 0; i < k; ++i) {
          ir[i] = order[static_cast<size_t>(i)];
          vr[i] = row[ir[i]];
        }
      }
    }
  });
}

void CpuBackend::CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                              const Tensor& lse) {
  if (cpu::AnySixteenBit({&logits})) {
    cpu::Widened w(*this);
    return CrossEntropy(w.In(logits), targets, losses, lse);
  }
  CheckOperand(logits, "CrossEntropy");
  CheckOperand(targets, "CrossEntropy");
  CheckOperand(losses, "CrossEntropy");
  cpu::CheckDType(logits, DType::kF32, "CrossEntropy", "logits");
  cpu::CheckDType(targets, DType::kI32, "CrossEntropy", "targets");
  cpu::CheckDType(losses, DType::kF32, "CrossEntropy", "losses");
  SY_CHECK_EQ(logits.rank(), 2) << "CrossEntropy: logits " << logits.ToString()
                                << " must be [N, V]";
  const int64_t rows = logits.dim(0), v = logits.dim(1);
  SY_CHECK_GT(v, 0) << "CrossEntropy: empty vocabulary";
  cpu::CheckNumel(targets, rows, "CrossEntropy", "targets");
  cpu::CheckNumel(losses, rows, "CrossEntropy", "losses");
  float* plse = nullptr;
  if (lse.defined()) {
    CheckOperand(lse, "CrossEntropy");
    cpu::CheckDType(lse, DType::kF32, "CrossEntropy", "lse");
    cpu::CheckNumel(lse, rows, "CrossEntropy", "lse");
    plse = lse.data<float>();
  }
  const float* pl = logits.data<float>();
  const int32_t* pt = targets.data<int32_t>();
  float* ploss = losses.data<float>();
  pool().ParallelFor(rows, RowGrain(v), [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>(v));
    for (int64_t r = lo; r < hi; ++r) {
      const float* row = pl + r * v;
      int32_t t = pt[r];
      SY_CHECK(t == -1 || (t >= 0 && t < v))
          << "CrossEntropy: target " << t << " of row " << r << " outside [0, " << v << ")";
      float l = LogSumExpRow(row, v, scratch.data());
      if (plse != nullptr) plse[r] = l;
      ploss[r] = t < 0 ? 0.0f : l - row[t];
    }
  });
}

void CpuBackend::CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& dlosses,
                                      const Tensor& dlogits) {
  if (cpu::AnySixteenBit({&logits, &dlosses, &dlogits})) {
    cpu::Widened w(*this);
    return CrossEntropyBackward(w.In(logits), targets, lse, w.In(dlosses), w.Out(dlogits));
  }
  CheckOperand(logits, "CrossEntropyBackward");
  CheckOperand(targets, "CrossEntropyBackward");
  CheckOperand(lse, "CrossEntropyBackward");
  CheckOperand(dlosses, "CrossEntropyBackward");
  CheckOperand(dlogits, "CrossEntropyBackward");
  cpu::CheckDType(logits, DType::kF32, "CrossEntropyBackward", "logits");
  cpu::CheckDType(targets, DType::kI32, "CrossEntropyBackward", "targets");
  cpu::CheckDType(lse, DType::kF32, "CrossEntropyBackward", "lse");
  cpu::CheckDType(dlosses, DType::kF32, "CrossEntropyBackward", "dlosses");
  cpu::CheckDType(dlogits, DType::kF32, "CrossEntropyBackward", "dlogits");
  SY_CHECK_EQ(logits.rank(), 2) << "CrossEntropyBackward: logits " << logits.ToString()
                                << " must be [N, V]";
  cpu::CheckSameShape(logits, dlogits, "CrossEntropyBackward", "logits", "dlogits");
  const int64_t rows = logits.dim(0), v = logits.dim(1);
  cpu::CheckNumel(targets, rows, "CrossEntropyBackward", "targets");
  cpu::CheckNumel(lse, rows, "CrossEntropyBackward", "lse");
  cpu::CheckNumel(dlosses, rows, "CrossEntropyBackward", "dlosses");
  const float* pl = logits.data<float>();
  const int32_t* pt = targets.data<int32_t>();
  const float* plse = lse.data<float>();
  const float* pdl = dlosses.data<float>();
  float* pd = dlogits.data<float>();
  pool().ParallelFor(rows, RowGrain(v), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* row = pl + r * v;
      float* drow = pd + r * v;
      int32_t t = pt[r];
      SY_CHECK(t == -1 || (t >= 0 && t < v))
          << "CrossEntropyBackward: target " << t << " of row " << r << " outside [0, " << v << ")";
      if (t < 0) {
        std::fill(drow, drow + v, 0.0f);
        continue;
      }
      const float scale = pdl[r];
      cpu::ExpShiftRow(row, plse[r], drow, v);
      for (int64_t j = 0; j < v; ++j) drow[j] *= scale;
      drow[t] -= scale;
    }
  });
}

}  // namespace sy
