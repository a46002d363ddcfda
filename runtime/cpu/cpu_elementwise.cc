// Elementwise operators of the CPU backend. Every loop is split over the thread pool in ranges of
// kGrain elements and vectorised through cpu_vec.h; outputs may alias inputs (each element is read
// before it is written).
#include <cmath>
#include <cstring>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_op_util.h"
#include "runtime/cpu/cpu_vec.h"
#include "runtime/cpu/cpu_widened.h"

namespace sy {
namespace {

using cpu::kLanes;
using cpu::VecF;

constexpr int64_t kGrain = 16384;
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// x * sigmoid(x) and its pieces, vector and scalar.
inline VecF VSigmoid(VecF x) {
  VecF one = cpu::VSet1(1.0f);
  return cpu::VDiv(one, cpu::VAdd(one, cpu::VExp(cpu::VSub(cpu::VZero(), x))));
}
inline float SSigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// d/dx silu(x) = s * (1 + x * (1 - s)), s = sigmoid(x).
inline VecF VSiluGrad(VecF x) {
  VecF s = VSigmoid(x);
  VecF one = cpu::VSet1(1.0f);
  return cpu::VMul(s, cpu::VFma(x, cpu::VSub(one, s), one));
}
inline float SSiluGrad(float x) {
  float s = SSigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

}  // namespace

void CpuBackend::Fill(const Tensor& out, float value) {
  CheckOperand(out, "Fill");
  int64_t n = out.numel();
  switch (out.dtype()) {
    case DType::kF32: {
      float* o = out.data<float>();
      pool().ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { std::fill(o + b, o + e, value); });
      return;
    }
    case DType::kBF16: {
      BF16* o = out.data<BF16>();
      BF16 v = F32ToBF16(value);
      pool().ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
      return;
    }
    case DType::kF16: {
      F16* o = out.data<F16>();
      F16 v = F32ToF16(value);
      pool().ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
      return;
    }
    case DType::kI32: {
      int32_t* o = out.data<int32_t>();
      auto v = static_cast<int32_t>(value);
      pool().ParallelFor(n, kGrain, [&](int64_t b, int64_t e) { std::fill(o + b, o + e, v); });
      return;
    }
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
  SY_CHECK(false) << "Fill: unsupported dtype of " << out.ToString() << " (f32, bf16, f16 or i32)";
}

void CpuBackend::Convert(const Tensor& src, const Tensor& out) {
  CheckOperand(src, "Convert");
  CheckOperand(out, "Convert");
  SY_CHECK(IsFloatingPoint(src.dtype()) && IsFloatingPoint(out.dtype()))
      << "Convert: " << src.ToString() << " -> " << out.ToString()
      << " is not a floating-point conversion";
  cpu::CheckNumel(out, src.numel(), "Convert", "out");
  const auto* s = static_cast<const char*>(src.data());
  auto* o = static_cast<char*>(out.data());
  size_t ss = DTypeSize(src.dtype()), os = DTypeSize(out.dtype());
  pool().ParallelFor(src.numel(), kGrain, [&](int64_t b, int64_t e) {
    SY_CHECK_OK(ConvertBuffer(s + b * ss, src.dtype(), o + b * os, out.dtype(),
                              static_cast<size_t>(e - b)));
  });
}

void CpuBackend::Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (cpu::AnySixteenBit({&a, &b, &out})) {
    cpu::Widened w(*this);
    return Add(w.In(a), w.In(b), w.Out(out));
  }
  for (const Tensor* t : {&a, &b, &out}) {
    CheckOperand(*t, "Add");
    cpu::CheckDType(*t, DType::kF32, "Add", "operand");
  }
  cpu::CheckSameShape(a, b, "Add", "a", "b");
  cpu::CheckSameShape(a, out, "Add", "a", "out");
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(a.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = pa[i] + pb[i];
  });
}

void CpuBackend::Mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (cpu::AnySixteenBit({&a, &b, &out})) {
    cpu::Widened w(*this);
    return Mul(w.In(a), w.In(b), w.Out(out));
  }
  for (const Tensor* t : {&a, &b, &out}) {
    CheckOperand(*t, "Mul");
    cpu::CheckDType(*t, DType::kF32, "Mul", "operand");
  }
  cpu::CheckSameShape(a, b, "Mul", "a", "b");
  cpu::CheckSameShape(a, out, "Mul", "a", "out");
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(a.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = pa[i] * pb[i];
  });
}

void CpuBackend::Scale(const Tensor& x, float alpha, const Tensor& out) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return Scale(w.In(x), alpha, w.Out(out));
  }
  for (const Tensor* t : {&x, &out}) {
    CheckOperand(*t, "Scale");
    cpu::CheckDType(*t, DType::kF32, "Scale", "operand");
  }
  cpu::CheckSameShape(x, out, "Scale", "x", "out");
  const float* px = x.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = alpha * px[i];
  });
}

void CpuBackend::Axpy(float alpha, const Tensor& x, const Tensor& y) {
  if (cpu::AnySixteenBit({&x, &y})) {
    cpu::Widened w(*this);
    return Axpy(alpha, w.In(x), w.Out(y, /*accumulate=*/true));
  }
  for (const Tensor* t : {&x, &y}) {
    CheckOperand(*t, "Axpy");
    cpu::CheckDType(*t, DType::kF32, "Axpy", "operand");
  }
  cpu::CheckSameShape(x, y, "Axpy", "x", "y");
  const float* px = x.data<float>();
  float* py = y.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) py[i] += alpha * px[i];
  });
}

void CpuBackend::AddBias(const Tensor& x, const Tensor& bias, const Tensor& out) {
  if (cpu::AnySixteenBit({&x, &bias, &out})) {
    cpu::Widened w(*this);
    return AddBias(w.In(x), w.In(bias), w.Out(out));
  }
  for (const Tensor* t : {&x, &bias, &out}) {
    CheckOperand(*t, "AddBias");
    cpu::CheckDType(*t, DType::kF32, "AddBias", "operand");
  }
  cpu::CheckSameShape(x, out, "AddBias", "x", "out");
  int64_t n = cpu::Cols(x, "AddBias");
  int64_t rows = cpu::Rows(x, "AddBias");
  cpu::CheckNumel(bias, n, "AddBias", "bias");
  const float* px = x.data<float>();
  const float* pb = bias.data<float>();
  float* po = out.data<float>();
  int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n));
  pool().ParallelFor(rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* xr = px + r * n;
      float* orow = po + r * n;
      for (int64_t j = 0; j < n; ++j) orow[j] = xr[j] + pb[j];
    }
  });
}

void CpuBackend::Silu(const Tensor& x, const Tensor& out) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return Silu(w.In(x), w.Out(out));
  }
  for (const Tensor* t : {&x, &out}) {
    CheckOperand(*t, "Silu");
    cpu::CheckDType(*t, DType::kF32, "Silu", "operand");
  }
  cpu::CheckSameShape(x, out, "Silu", "x", "out");
  const float* px = x.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + kLanes <= hi; i += kLanes) {
      VecF v = cpu::VLoad(px + i);
      cpu::VStore(po + i, cpu::VMul(v, VSigmoid(v)));
    }
    for (; i < hi; ++i) po[i] = px[i] * SSigmoid(px[i]);
  });
}

void CpuBackend::SiluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  if (cpu::AnySixteenBit({&x, &dout, &dx})) {
    cpu::Widened w(*this);
    return SiluBackward(w.In(x), w.In(dout), w.Out(dx));
  }
  for (const Tensor* t : {&x, &dout, &dx}) {
    CheckOperand(*t, "SiluBackward");
    cpu::CheckDType(*t, DType::kF32, "SiluBackward", "operand");
  }
  cpu::CheckSameShape(x, dout, "SiluBackward", "x", "dout");
  cpu::CheckSameShape(x, dx, "SiluBackward", "x", "dx");
  const float* px = x.data<float>();
  const float* pd = dout.data<float>();
  float* po = dx.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + kLanes <= hi; i += kLanes) {
      cpu::VStore(po + i, cpu::VMul(cpu::VLoad(pd + i), VSiluGrad(cpu::VLoad(px + i))));
    }
    for (; i < hi; ++i) po[i] = pd[i] * SSiluGrad(px[i]);
  });
}

void CpuBackend::Gelu(const Tensor& x, const Tensor& out) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return Gelu(w.In(x), w.Out(out));
  }
  for (const Tensor* t : {&x, &out}) {
    CheckOperand(*t, "Gelu");
    cpu::CheckDType(*t, DType::kF32, "Gelu", "operand");
  }
  cpu::CheckSameShape(x, out, "Gelu", "x", "out");
  const float* px = x.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float v = px[i];
      po[i] = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
    }
  });
}

void CpuBackend::GeluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  if (cpu::AnySixteenBit({&x, &dout, &dx})) {
    cpu::Widened w(*this);
    return GeluBackward(w.In(x), w.In(dout), w.Out(dx));
  }
  for (const Tensor* t : {&x, &dout, &dx}) {
    CheckOperand(*t, "GeluBackward");
    cpu::CheckDType(*t, DType::kF32, "GeluBackward", "operand");
  }
  cpu::CheckSameShape(x, dout, "GeluBackward", "x", "dout");
  cpu::CheckSameShape(x, dx, "GeluBackward", "x", "dx");
  const float* px = x.data<float>();
  const float* pd = dout.data<float>();
  float* po = dx.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float v = px[i];
      // d/dx [x Phi(x)] = Phi(x) + x phi(x).
      float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
      float pdf = kInvSqrt2Pi * std::exp(-0.5f * v * v);
      po[i] = pd[i] * (cdf + v * pdf);
    }
  });
}

void CpuBackend::Relu(const Tensor& x, const Tensor& out) {
  if (cpu::AnySixteenBit({&x, &out})) {
    cpu::Widened w(*this);
    return Relu(w.In(x), w.Out(out));
  }
  for (const Tensor* t : {&x, &out}) {
    CheckOperand(*t, "Relu");
    cpu::CheckDType(*t, DType::kF32, "Relu", "operand");
  }
  cpu::CheckSameShape(x, out, "Relu", "x", "out");
  const float* px = x.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = px[i] < 0.0f ? 0.0f : px[i];
  });
}

void CpuBackend::ReluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  if (cpu::AnySixteenBit({&x, &dout, &dx})) {
    cpu::Widened w(*this);
    return ReluBackward(w.In(x), w.In(dout), w.Out(dx));
  }
  for (const Tensor* t : {&x, &dout, &dx}) {
    CheckOperand(*t, "ReluBackward");
    cpu::CheckDType(*t, DType::kF32, "ReluBackward", "operand");
  }
  cpu::CheckSameShape(x, dout, "ReluBackward", "x", "dout");
  cpu::CheckSameShape(x, dx, "ReluBackward", "x", "dx");
  const float* px = x.data<float>();
  const float* pd = dout.data<float>();
  float* po = dx.data<float>();
  pool().ParallelFor(x.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) po[i] = px[i] > 0.0f ? pd[i] : 0.0f;
  });
}

void CpuBackend::Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (cpu::AnySixteenBit({&gate, &up, &out})) {
    cpu::Widened w(*this);
    return Swiglu(w.In(gate), w.In(up), w.Out(out));
  }
  for (const Tensor* t : {&gate, &up, &out}) {
    CheckOperand(*t, "Swiglu");
    cpu::CheckDType(*t, DType::kF32, "Swiglu", "operand");
  }
  cpu::CheckSameShape(gate, up, "Swiglu", "gate", "up");
  cpu::CheckSameShape(gate, out, "Swiglu", "gate", "out");
  const float* pg = gate.data<float>();
  const float* pu = up.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(gate.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + kLanes <= hi; i += kLanes) {
      VecF g = cpu::VLoad(pg + i);
      cpu::VStore(po + i, cpu::VMul(cpu::VMul(g, VSigmoid(g)), cpu::VLoad(pu + i)));
    }
    for (; i < hi; ++i) po[i] = pg[i] * SSigmoid(pg[i]) * pu[i];
  });
}

void CpuBackend::SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout,
                                const Tensor& dgate, const Tensor& dup) {
  if (cpu::AnySixteenBit({&gate, &up, &dout, &dgate, &dup})) {
    cpu::Widened w(*this);
    return SwigluBackward(w.In(gate), w.In(up), w.In(dout), w.Out(dgate), w.Out(dup));
  }
  for (const Tensor* t : {&gate, &up, &dout, &dgate, &dup}) {
    CheckOperand(*t, "SwigluBackward");
    cpu::CheckDType(*t, DType::kF32, "SwigluBackward", "operand");
  }
  cpu::CheckSameShape(gate, up, "SwigluBackward", "gate", "up");
  cpu::CheckSameShape(gate, dout, "SwigluBackward", "gate", "dout");
  cpu::CheckSameShape(gate, dgate, "SwigluBackward", "gate", "dgate");
  cpu::CheckSameShape(gate, dup, "SwigluBackward", "gate", "dup");
  const float* pg = gate.data<float>();
  const float* pu = up.data<float>();
  const float* pd = dout.data<float>();
  float* pdg = dgate.data<float>();
  float* pdu = dup.data<float>();
  pool().ParallelFor(gate.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    int64_t i = lo;
    for (; i + kLanes <= hi; i += kLanes) {
      VecF g = cpu::VLoad(pg + i);
      VecF u = cpu::VLoad(pu + i);
      VecF d = cpu::VLoad(pd + i);
      VecF silu = cpu::VMul(g, VSigmoid(g));
      VecF grad = VSiluGrad(g);
      cpu::VStore(pdg + i, cpu::VMul(cpu::VMul(d, u), grad));
      cpu::VStore(pdu + i, cpu::VMul(d, silu));
    }
    for (; i < hi; ++i) {
      float g = pg[i], u = pu[i], d = pd[i];
      pdg[i] = d * u * SSiluGrad(g);
      pdu[i] = d * g * SSigmoid(g);
    }
  });
}

}  // namespace sy
