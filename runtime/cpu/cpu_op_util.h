// Private to runtime/cpu: argument checks and shape helpers shared by the CPU operators.
// Every helper aborts through SY_CHECK with the operator's name when an invariant is broken.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/dtype.h"
#include "runtime/core/tensor.h"

namespace sy::cpu {

// The last dimension of t (t viewed as [rows, cols]).
inline int64_t Cols(const Tensor& t, const char* op) {
  SY_CHECK_GE(t.rank(), 1) << op << ": " << t.ToString() << " must have rank >= 1";
  return t.dim(t.rank() - 1);
}

// The product of every dimension but the last.
inline int64_t Rows(const Tensor& t, const char* op) {
  SY_CHECK_GE(t.rank(), 1) << op << ": " << t.ToString() << " must have rank >= 1";
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.dim(i);
  return rows;
}

inline void CheckDType(const Tensor& t, DType dtype, const char* op, const char* name) {
  SY_CHECK(t.dtype() == dtype) << op << ": " << name << " is " << t.ToString() << ", expected "
                               << DTypeName(dtype);
}

inline void CheckWeightDType(const Tensor& t, const char* op, const char* name) {
  SY_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16)
      << op << ": " << name << " is " << t.ToString() << ", expected f32, bf16 or f16";
}

inline void CheckSameShape(const Tensor& a, const Tensor& b, const char* op, const char* a_name,
                           const char* b_name) {
  SY_CHECK(a.shape() == b.shape()) << op << ": " << a_name << " " << a.ToString() << " and "
                                   << b_name << " " << b.ToString() << " differ in shape";
}

inline void CheckNumel(const Tensor& t, int64_t numel, const char* op, const char* name) {
  SY_CHECK_EQ(t.numel(), numel) << op << ": " << name << " " << t.ToString() << " should hold "
                                << numel << " elements";
}

inline void CheckShape(const Tensor& t, std::initializer_list<int64_t> dims, const char* op,
                       const char* name) {
  Shape expected(dims);
  SY_CHECK(t.shape() == expected) << op << ": " << name << " is " << t.ToString() << ", expected "
                                  << expected.ToString();
}

// Calls fn(static_cast<const W*>(data)) with W the storage type of a f32/bf16/f16 weight.
template <typename Fn>
decltype(auto) DispatchWeight(DType dtype, const void* data, Fn&& fn) {
  switch (dtype) {
    case DType::kBF16:
      return std::forward<Fn>(fn)(static_cast<const BF16*>(data));
    case DType::kF16:
      return std::forward<Fn>(fn)(static_cast<const F16*>(data));
    case DType::kF32:
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
  SY_CHECK(dtype == DType::kF32) << "weight dtype " << DTypeName(dtype)
                                 << " is not one of f32, bf16, f16";
  return std::forward<Fn>(fn)(static_cast<const float*>(data));
}

// c = beta * c over rows x cols with leading dimension ldc; beta == 0 overwrites (BLAS rule: c is
// not read, so uninitialised memory is fine). The GEMMs apply it before accumulating alpha * a @ b.
inline void ScaleMatrix(float* c, int64_t rows, int64_t cols, int64_t ldc, float beta) {
  if (beta == 1.0f) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + cols, 0.0f);
    } else {
      for (int64_t j = 0; j < cols; ++j) row[j] *= beta;
    }
  }
}

}  // namespace sy::cpu
