// Host <-> device moves for the model code: small index tables, routing decisions, scalars and
// parameter values. Every move goes through Backend::AllocateHost + CopyAsync on the compute
// stream and then synchronizes that stream, so the host data may be reused as soon as the call
// returns and a download is complete when it returns.
//
// These are synchronisation points: the model uses them where the host genuinely needs the data
// (routing decisions become grouped-GEMM group sizes, the loss becomes a float), never per token.
// Thread-safety: as the Backend's operators (the thread that owns the compute stream).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy {

// A new device tensor holding `values` (shape.numel() == values.size()).
Result<Tensor> UploadI32(Backend& backend, std::span<const int32_t> values, Shape shape);
Result<Tensor> UploadF32(Backend& backend, std::span<const float> values, Shape shape);

// Writes `values` into the existing device tensor `dst` (f32, bf16 or f16; converted on the host,
// round to nearest even; q8_0 or q4_0: quantized on the host by the reference quantizers).
Status CopyFromHost(Backend& backend, std::span<const float> values, const Tensor& dst);

// The contents of a device (or host) tensor; floating-point dtypes are widened to f32, quantized
// ones dequantized.
Result<std::vector<float>> DownloadF32(Backend& backend, const Tensor& src);
Result<std::vector<int32_t>> DownloadI32(Backend& backend, const Tensor& src);

// A new device tensor, f32, filled with zeros.
Result<Tensor> Zeros(Backend& backend, Shape shape);
// A new device tensor i32 [n] holding 0, 1, ..., n-1.
Result<Tensor> Iota(Backend& backend, int64_t n);

}  // namespace sy
