// ggml's tensor block formats: conversion of GGUF tensor data to f32, and the two reference
// quantizers the GGUF export offers.
//
// Layouts (ggml/src/ggml-common.h; a block covers `GgmlBlockSize` consecutive values of a row):
//   Q8_0  { f16 d; i8 qs[32]; }                       x[i] = d * qs[i]
//   Q4_0  { f16 d; u8 qs[16]; }                       x[i] = d * ((qs[i] & 15) - 8),
//                                                     x[i + 16] = d * ((qs[i] >> 4) - 8)
//   Q4_K  { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }  256 values in 8 sub-blocks of 32 with
//         6-bit scales and mins packed in `scales` (get_scale_min_k4); sub-block pair j uses
//         qs[32 j / 2 ..] low nibbles then high nibbles: x = d * sc * q - dmin * m
// F32, F16, BF16 and F64 convert elementwise.
//
// The quantizers reproduce ggml's reference quantize_row_q8_0_ref / quantize_row_q4_0_ref (and
// gguf-py's gguf.quants, which matches them bit for bit): Q8_0 takes d = amax / 127 and rounds
// x / d half away from zero; Q4_0 takes d = (the value of largest magnitude) / -8 and
// q = min(15, trunc(x / d + 8.5)).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/core/status.h"
#include "storage/formats/gguf.h"

namespace sy::storage {

// Whether DequantizeToF32 handles `type`.
bool GgmlTypeConvertsToF32(GgmlType type);

// Converts `data`, `out.size()` values of `type` (a multiple of its block size), to f32.
// InvalidArgument when the type has no conversion here or the sizes do not agree.
Status DequantizeToF32(GgmlType type, std::span<const uint8_t> data, std::span<float> out);

// Quantizes `in` (a multiple of 32 values) into Q8_0 or Q4_0 blocks; `out` must hold
// in.size() / 32 * GgmlTypeSize(type) bytes. InvalidArgument for any other type or size.
Status QuantizeFromF32(GgmlType type, std::span<const float> in, std::span<uint8_t> out);

}  // namespace sy::storage
