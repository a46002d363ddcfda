// The element types the CUDA kernels dispatch on. Kernel headers use these instead of sy::DType so
// that the .cu files need none of runtime/core beyond check.h; cuda_ops.cc maps DType onto them.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace sy::cuda {

enum class FloatType : uint8_t { kF32, kBF16, kF16 };

inline const char* FloatTypeName(FloatType type) {
  switch (type) {
    case FloatType::kF32:
      return "f32";
    case FloatType::kBF16:
      return "bf16";
    case FloatType::kF16:
      return "f16";
  }
  return "?";
}

// A floating-point operand of a kernel launch: its device data and element type (Note [16-bit
// operands] in runtime/backend/backend.h: each operand of an operator may have its own).
struct FloatIn {
  const void* data = nullptr;
  FloatType type = FloatType::kF32;
};
struct FloatOut {
  void* data = nullptr;
  FloatType type = FloatType::kF32;
};

// Whether every operand listed is f32: launchers then run their original f32 kernels (the
// arithmetic of an all-f32 call is unchanged), and the runtime-typed ones otherwise.
inline bool AllF32(std::initializer_list<FloatType> types) {
  for (FloatType t : types) {
    if (t != FloatType::kF32) return false;
  }
  return true;
}

}  // namespace sy::cuda
