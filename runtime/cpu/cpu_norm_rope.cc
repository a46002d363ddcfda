// RMSNorm and rotary embedding of the CPU backend.
//
// RMSNorm reads its weight in f32, bf16 or f16, widened in registers. The rotary angles are
// computed in double (position * theta^(-2i/D)) and rounded once, so long positions keep full f32
// accuracy; the table is built per call and shared by every head.
#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_op_util.h"
#include "runtime/cpu/cpu_vec.h"
#include "runtime/cpu/cpu_widened.h"

namespace sy {
namespace {

using cpu::kLanes;
using cpu::VecF;

int64_t RowGrain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)); }

template <typename W>
void RmsNormRow(const float* x, const W* w, float r, float* out, int64_t n) {
  VecF vr = cpu::VSet1(r);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    cpu::VStore(out + j, cpu::VMul(cpu::VMul(cpu::VLoad(x + j), vr), cpu::VLoad(w + j)));
  }
  for (; j < n; ++j) out[j] = x[j] * r * cpu::SLoad(w + j);
}

// dx = r * g - x * r^3 * (g . x) / N with g = dout * w.
template <typename W>
void RmsNormBackwardRow(const float* x, const W* w, float r, const float* dout, float* dx,
                        int64_t n) {
  VecF acc = cpu::VZero();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    VecF g = cpu::VMul(cpu::VLoad(dout + j), cpu::VLoad(w + j));
    acc = cpu::VFma(g, cpu::VLoad(x + j), acc);
  }
  float dot = cpu::VReduceAdd(acc);
  for (; j < n; ++j) dot += dout[j] * cpu::SLoad(w + j) * x[j];
  const float coef = r * r * r * dot / static_cast<float>(n);
  VecF vr = cpu::VSet1(r), vc = cpu::VSet1(coef);
  j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    VecF g = cpu::VMul(cpu::VLoad(dout + j), cpu::VLoad(w + j));
    cpu::VStore(dx + j, cpu::VSub(cpu::VMul(vr, g), cpu::VMul(vc, cpu::VLoad(x + j))));
  }
  for (; j < n; ++j) dx[j] = r * dout[j] * cpu::SLoad(w + j) - coef * x[j];
}

// cos/sin of position[t] * theta^(-2i/D) for i < D/2, as [T, D/2] each (D: the rotary dim).
void RopeTable(ThreadPool& pool, const int32_t* positions, int64_t t_dim, int64_t d, float theta,
               std::vector<float>& cos_table, std::vector<float>& sin_table) {
  const int64_t half = d / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = std::pow(
        static_cast<double>(theta), -2.0 * static_cast<double>(i) / static_cast<double>(d));
  }
  cos_table.resize(static_cast<size_t>(t_dim * half));
  sin_table.resize(static_cast<size_t>(t_dim * half));
  pool.ParallelFor(
      t_dim, std::max<int64_t>(1, 256 / std::max<int64_t>(1, half)), [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          for (int64_t i = 0; i < half; ++i) {
            double angle = static_cast<double>(positions[t]) * inv_freq[static_cast<size_t>(i)];
            cos_table[static_cast<size_t>(t * half + i)] = static_cast<float>(std::cos(angle));
            sin_table[static_cast<size_t>(t * half + i)] = static_cast<float>(std::sin(angle));
          }
        }
      });
}

// RopeTable's tables of the last (positions, D, theta) seen on this thread. A step rotates the q
// and k of every layer by the same positions, so it computes them once instead of twice per
// layer (each table costs D/2 pow, cos and sin in double: ~10 us for D = 128, ~2% of a
// small-model decode step in all). The tables are recomputed whenever any of the three differs.
struct RopeTables {
  std::vector<int32_t> positions;
  int64_t d = -1;
  float theta = 0.0f;
  std::vector<float> cos_table, sin_table;
};

const RopeTables& CachedRopeTable(ThreadPool& pool, const int32_t* positions, int64_t t_dim,
                                  int64_t d, float theta) {
  static thread_local RopeTables cache;
  const bool same = cache.d == d && cache.theta == theta &&
                    cache.positions.size() == static_cast<size_t>(t_dim) &&
                    std::equal(positions, positions + t_dim, cache.positions.begin());
  if (!same) {
    cache.d = -1;  // stays invalid should RopeTable throw
    RopeTable(pool, positions, t_dim, d, theta, cache.cos_table, cache.sin_table);
    cache.positions.assign(positions, positions + t_dim);
    cache.theta = theta;
    cache.d = d;
  }
  return cache;
}

// Rotates (x[i], x[i + R/2]) of each head of D values by +angle (forward) or -angle (backward: the
// transpose), R = rotary; the values past R pass through.
void RopeApply(ThreadPool& pool, const float* x, float* out, int64_t t_dim, int64_t heads,
               int64_t d, int64_t rotary, const std::vector<float>& cos_table,
               const std::vector<float>& sin_table, bool inverse) {
  const int64_t half = rotary / 2;
  const float sign = inverse ? -1.0f : 1.0f;
  pool.ParallelFor(t_dim, RowGrain(heads * d), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const float* c = cos_table.data() + t * half;
      const float* s = sin_table.data() + t * half;
      for (int64_t h = 0; h < heads; ++h) {
        const float* xr = x + (t * heads + h) * d;
        float* orow = out + (t * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          float x1 = xr[i], x2 = xr[i + half];
          float si = sign * s[i];
          orow[i] = x1 * c[i] - x2 * si;
          orow[i + half] = x2 * c[i] + x1 * si;
        }
        if (orow != xr) std::copy(xr + rotary, xr + d, orow + rotary);
      }
    }
  });
}

void CheckRope(const Tensor& x, const Tensor& positions, const RopeOptions& rope, const Tensor& out,
               const char* op) {
  cpu::CheckDType(x, DType::kF32, op, "x");
  cpu::CheckDType(out, DType::kF32, op, "out");
  cpu::CheckDType(positions, DType::kI32, op, "positions");
  SY_CHECK_EQ(x.rank(), 3) << op << ": x " << x.ToString() << " must be [T, H, D]";
  const int64_t rotary = rope.RotaryDim(x.dim(2));
  SY_CHECK(rotary > 0 && rotary % 2 == 0 && rotary <= x.dim(2))
      << op << ": rotary dim " << rotary << " must be even and within the head of " << x.ToString();
  cpu::CheckSameShape(x, out, op, "x", "out");
  cpu::CheckNumel(positions, x.dim(0), op, "positions");
}

}  // namespace

void CpuBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
                         const Tensor& rstd) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return RmsNorm(w.In(x), weight, eps, w.Out(out), rstd);
  }
  CheckOperand(x, "RmsNorm");
  CheckOperand(weight, "RmsNorm");
  CheckOperand(out, "RmsNorm");
  cpu::CheckDType(x, DType::kF32, "RmsNorm", "x");
  cpu::CheckDType(out, DType::kF32, "RmsNorm", "out");
  cpu::CheckWeightDType(weight, "RmsNorm", "weight");
  cpu::CheckSameShape(x, out, "RmsNorm", "x", "out");
  const int64_t n = cpu::Cols(x, "RmsNorm");
  const int64_t rows = cpu::Rows(x, "RmsNorm");
  SY_CHECK_GT(n, 0) << "RmsNorm: empty last dimension of " << x.ToString();
  cpu::CheckNumel(weight, n, "RmsNorm", "weight");
  float* prstd = nullptr;
  if (rstd.defined()) {
    CheckOperand(rstd, "RmsNorm");
    cpu::CheckDType(rstd, DType::kF32, "RmsNorm", "rstd");
    cpu::CheckNumel(rstd, rows, "RmsNorm", "rstd");
    prstd = rstd.data<float>();
  }
  const float* px = x.data<float>();
  float* po = out.data<float>();
  cpu::DispatchWeight(weight.dtype(), weight.data(), [&](auto* w) {
    pool().ParallelFor(rows, RowGrain(n), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const float* xr = px + r * n;
        float ms = cpu::SumSquaresRow(xr, n) / static_cast<float>(n);
        float inv = 1.0f / std::sqrt(ms + eps);
        if (prstd != nullptr) prstd[r] = inv;
        RmsNormRow(xr, w, inv, po + r * n, n);
      }
    });
  });
}

void CpuBackend::RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                 const Tensor& dout, const Tensor& dx, const Tensor& dweight) {
  if (cpu::AnySixteenBit({&x, &dout, &dx})) {
    cpu::Widened w(*this);
    return RmsNormBackward(w.In(x), weight, rstd, w.In(dout), w.Out(dx), dweight);
  }
  CheckOperand(x, "RmsNormBackward");
  CheckOperand(weight, "RmsNormBackward");
  CheckOperand(rstd, "RmsNormBackward");
  CheckOperand(dout, "RmsNormBackward");
  CheckOperand(dx, "RmsNormBackward");
  cpu::CheckDType(x, DType::kF32, "RmsNormBackward", "x");
  cpu::CheckWeightDType(weight, "RmsNormBackward", "weight");
  cpu::CheckDType(rstd, DType::kF32, "RmsNormBackward", "rstd");
  cpu::CheckDType(dout, DType::kF32, "RmsNormBackward", "dout");
  cpu::CheckDType(dx, DType::kF32, "RmsNormBackward", "dx");
  cpu::CheckSameShape(x, dout, "RmsNormBackward", "x", "dout");
  cpu::CheckSameShape(x, dx, "RmsNormBackward", "x", "dx");
  const int64_t n = cpu::Cols(x, "RmsNormBackward");
  const int64_t rows = cpu::Rows(x, "RmsNormBackward");
  cpu::CheckNumel(weight, n, "RmsNormBackward", "weight");
  cpu::CheckNumel(rstd, rows, "RmsNormBackward", "rstd");
  const float* px = x.data<float>();
  const float* pr = rstd.data<float>();
  const float* pd = dout.data<float>();
  float* pdx = dx.data<float>();
  if (dweight.defined()) {
    // Before dx is written: dx may alias dout.
    CheckOperand(dweight, "RmsNormBackward");
    cpu::CheckDType(dweight, DType::kF32, "RmsNormBackward", "dweight");
    cpu::CheckNumel(dweight, n, "RmsNormBackward", "dweight");
    float* pdw = dweight.data<float>();
    // Each task owns a range of columns and walks every row: race-free and deterministic.
    pool().ParallelFor(n, std::max<int64_t>(64, 16384 / std::max<int64_t>(1, rows)),
                       [&](int64_t lo, int64_t hi) {
                         float* acc = pdw + lo;
                         const int64_t width = hi - lo;
                         std::fill(acc, acc + width, 0.0f);
                         for (int64_t r = 0; r < rows; ++r) {
                           const float* xr = px + r * n + lo;
                           const float* dr = pd + r * n + lo;
                           const float inv = pr[r];
                           for (int64_t j = 0; j < width; ++j) acc[j] += dr[j] * xr[j] * inv;
                         }
                       });
  }
  cpu::DispatchWeight(weight.dtype(), weight.data(), [&](auto* w) {
    pool().ParallelFor(rows, RowGrain(n), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        RmsNormBackwardRow(px + r * n, w, pr[r], pd + r * n, pdx + r * n, n);
      }
    });
  });
}

void CpuBackend::Rope(const Tensor& x, const Tensor& positions, const RopeOptions& rope,
                      const Tensor& out) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return Rope(w.In(x), positions, rope, w.Out(out));
  }
  CheckOperand(x, "Rope");
  CheckOperand(positions, "Rope");
  CheckOperand(out, "Rope");
  CheckRope(x, positions, rope, out, "Rope");
  const int64_t rotary = rope.RotaryDim(x.dim(2));
  const RopeTables& tables =
      CachedRopeTable(pool(), positions.data<int32_t>(), x.dim(0), rotary, rope.theta);
  RopeApply(pool(), x.data<float>(), out.data<float>(), x.dim(0), x.dim(1), x.dim(2), rotary,
            tables.cos_table, tables.sin_table, /*inverse=*/false);
}

void CpuBackend::RopeBackward(const Tensor& dout, const Tensor& positions, const RopeOptions& rope,
                              const Tensor& dx) {
  if (cpu::AnySixteenBit({&dout, &dx})) {
    cpu::Widened w(*this);
    return RopeBackward(w.In(dout), positions, rope, w.Out(dx));
  }
  CheckOperand(dout, "RopeBackward");
  CheckOperand(positions, "RopeBackward");
  CheckOperand(dx, "RopeBackward");
  CheckRope(dout, positions, rope, dx, "RopeBackward");
  const int64_t rotary = rope.RotaryDim(dout.dim(2));
  const RopeTables& tables =
      CachedRopeTable(pool(), positions.data<int32_t>(), dout.dim(0), rotary, rope.theta);
  RopeApply(pool(), dout.data<float>(), dx.data<float>(), dout.dim(0), dout.dim(1), dout.dim(2),
            rotary, tables.cos_table, tables.sin_table, /*inverse=*/true);
}

}  // namespace sy
