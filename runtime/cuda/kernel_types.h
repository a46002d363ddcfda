// The element types the CUDA kernels dispatch on. Kernel headers use these instead of sy::DType so
// that the .cu files need none of runtime/core beyond check.h; cuda_ops.cc maps DType onto them.
// Thread-safety: plain values.
#pragma once

#include <cstdint>

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

}  // namespace sy::cuda
