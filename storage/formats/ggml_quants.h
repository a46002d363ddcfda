// ggml's tensor block formats: conversion of GGUF tensor data to f32, and the two reference
// quantizers the GGUF export offers.
//
// The block layouts and the reference quantizers (ggml's quantize_row_q8_0_ref /
// quantize_row_q4_0_ref) live in runtime/core/quant_blocks.h, shared with the runtime's quantized
// weights; this file maps GGUF's type numbers onto them. F32, F16, BF16 and F64 convert
// elementwise; Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are runtime DTypes whose blocks load as
// they are.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "storage/formats/gguf.h"

namespace sy::storage {

// Whether DequantizeToF32 handles `type`.
bool GgmlTypeConvertsToF32(GgmlType type);

// Converts `data`, `out.size()` values of `type` (a multiple of its block size), to f32.
// InvalidArgument when the type has no conversion here or the sizes do not agree.
Status DequantizeToF32(GgmlType type, std::span<const uint8_t> data, std::span<float> out);

// The runtime DType that holds `type`'s blocks as they are (Q8_0, Q4_0, the k-quants, F32, F16,
// BF16),
// or nullopt.
std::optional<DType> GgmlTypeToDType(GgmlType type);

// Quantizes `in` (a multiple of 32 values) into Q8_0 or Q4_0 blocks; `out` must hold
// in.size() / 32 * GgmlTypeSize(type) bytes. InvalidArgument for any other type or size.
Status QuantizeFromF32(GgmlType type, std::span<const float> in, std::span<uint8_t> out);

}  // namespace sy::storage
