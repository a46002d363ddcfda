#include "runtime/model/host_transfer.h"

#include <cstring>
#include <numeric>

#include "runtime/core/check.h"
#include "runtime/core/quant_blocks.h"

namespace sy {
namespace {

Status CopyToDevice(Backend& backend, const Tensor& host, const Tensor& dst) {
  backend.CopyAsync(host, dst, backend.compute_stream());
  // The staging buffer dies with `host` when we return, so the copy must be done by then.
  backend.SynchronizeStream(backend.compute_stream());
  return Status::Ok();
}

}  // namespace

Result<Tensor> UploadI32(Backend& backend, std::span<const int32_t> values, Shape shape) {
  SY_CHECK_EQ(static_cast<int64_t>(values.size()), shape.numel());
  SY_ASSIGN_OR_RETURN(Tensor dst, backend.Allocate(DType::kI32, shape));
  if (values.empty()) return dst;
  SY_ASSIGN_OR_RETURN(Tensor host, backend.AllocateHost(DType::kI32, shape));
  std::memcpy(host.data(), values.data(), values.size() * sizeof(int32_t));
  SY_RETURN_IF_ERROR(CopyToDevice(backend, host, dst));
  return dst;
}

Result<Tensor> UploadF32(Backend& backend, std::span<const float> values, Shape shape) {
  SY_CHECK_EQ(static_cast<int64_t>(values.size()), shape.numel());
  SY_ASSIGN_OR_RETURN(Tensor dst, backend.Allocate(DType::kF32, shape));
  SY_RETURN_IF_ERROR(CopyFromHost(backend, values, dst));
  return dst;
}

Status CopyFromHost(Backend& backend, std::span<const float> values, const Tensor& dst) {
  SY_CHECK_EQ(static_cast<int64_t>(values.size()), dst.numel())
      << "CopyFromHost into " << dst.ToString();
  if (values.empty()) return Status::Ok();
  SY_ASSIGN_OR_RETURN(Tensor host, backend.AllocateHost(dst.dtype(), dst.shape()));
  if (IsQuantized(dst.dtype())) {
    if (dst.dtype() != DType::kQ8_0 && dst.dtype() != DType::kQ4_0) {
      return InvalidArgumentError("CopyFromHost into " + dst.ToString() + ": " +
                                  std::string(DTypeName(dst.dtype())) +
                                  " has no quantizer here (q8_0 and q4_0 do)");
    }
    QuantizeBlocks(dst.dtype(), values.data(), host.data(), dst.numel());
  } else {
    SY_RETURN_IF_ERROR(
        ConvertBuffer(values.data(), DType::kF32, host.data(), dst.dtype(), values.size()));
  }
  return CopyToDevice(backend, host, dst);
}

Result<std::vector<float>> DownloadF32(Backend& backend, const Tensor& src) {
  SY_CHECK(IsFloatingPoint(src.dtype()) || IsQuantized(src.dtype()))
      << "DownloadF32 of " << src.ToString();
  std::vector<float> out(static_cast<size_t>(src.numel()));
  if (out.empty()) return out;
  SY_ASSIGN_OR_RETURN(Tensor host, backend.AllocateHost(src.dtype(), src.shape()));
  backend.CopyAsync(src, host, backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  if (IsQuantized(src.dtype())) {
    DequantizeBlocks(src.dtype(), host.data(), out.data(), src.numel());
    return out;
  }
  SY_RETURN_IF_ERROR(ConvertBuffer(host.data(), src.dtype(), out.data(), DType::kF32, out.size()));
  return out;
}

Result<std::vector<int32_t>> DownloadI32(Backend& backend, const Tensor& src) {
  SY_CHECK(src.dtype() == DType::kI32) << "DownloadI32 of " << src.ToString();
  std::vector<int32_t> out(static_cast<size_t>(src.numel()));
  if (out.empty()) return out;
  SY_ASSIGN_OR_RETURN(Tensor host, backend.AllocateHost(DType::kI32, src.shape()));
  backend.CopyAsync(src, host, backend.compute_stream());
  backend.SynchronizeStream(backend.compute_stream());
  std::memcpy(out.data(), host.data(), out.size() * sizeof(int32_t));
  return out;
}

Result<Tensor> Zeros(Backend& backend, Shape shape) {
  SY_ASSIGN_OR_RETURN(Tensor t, backend.Allocate(DType::kF32, shape));
  if (t.numel() > 0) backend.Fill(t, 0.0f);
  return t;
}

Result<Tensor> Iota(Backend& backend, int64_t n) {
  std::vector<int32_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), 0);
  return UploadI32(backend, values, Shape{n});
}

}  // namespace sy
