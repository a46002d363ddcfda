#include "runtime/core/tensor.h"

#include <cstring>

namespace sy {

Tensor::Tensor(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape, size_t offset_bytes)
    : buffer_(std::move(buffer)), dtype_(dtype), shape_(shape) {
  SY_CHECK(buffer_ != nullptr) << "Tensor over a null buffer";
  SY_CHECK_LE(offset_bytes + nbytes(), buffer_->bytes())
      << "tensor " << shape_.ToString() << " " << DTypeName(dtype_) << " at offset " << offset_bytes
      << " overruns its buffer";
  data_ = static_cast<char*>(buffer_->data()) + offset_bytes;
  strides_ = shape_.ContiguousStrides();
  device_ = buffer_->device();
}

Tensor Tensor::Wrap(void* data, DType dtype, Shape shape, Device device) {
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = shape.ContiguousStrides();
  t.device_ = device;
  return t;
}

Tensor Tensor::Host(DType dtype, Shape shape) {
  Result<Tensor> tensor = TryHost(dtype, shape);
  SY_CHECK(tensor.ok()) << tensor.status().ToString();
  return std::move(tensor).value();
}

Result<Tensor> Tensor::TryHost(DType dtype, Shape shape) {
  size_t bytes = 0;
  const auto block = static_cast<size_t>(DTypeBlockSize(dtype));
  if (shape.numel() >= 0 && static_cast<size_t>(shape.numel()) % block != 0) {
    return InvalidArgumentError("host tensor " + std::string(DTypeName(dtype)) + shape.ToString() +
                                " is not a whole number of blocks of " + std::to_string(block) +
                                " values");
  }
  if (shape.numel() < 0 || __builtin_mul_overflow(static_cast<size_t>(shape.numel()) / block,
                                                  DTypeBlockBytes(dtype), &bytes)) {
    return ResourceExhaustedError("host tensor " + std::string(DTypeName(dtype)) +
                                  shape.ToString() + " is larger than the address space");
  }
  Result<std::shared_ptr<Buffer>> buffer = AllocateHostBuffer(bytes);
  if (!buffer.ok()) {
    return buffer.status().WithContext("host tensor " + std::string(DTypeName(dtype)) +
                                       shape.ToString());
  }
  std::memset(buffer.value()->data(), 0, bytes);
  return Tensor(std::move(buffer).value(), dtype, shape);
}

int64_t Tensor::stride(int i) const {
  SY_CHECK(i >= 0 && i < rank()) << "stride " << i << " of rank-" << rank() << " tensor";
  return strides_[i];
}

bool Tensor::is_contiguous() const {
  auto expected = shape_.ContiguousStrides();
  for (int i = 0; i < rank(); ++i) {
    if (shape_[i] != 1 && strides_[i] != expected[i]) return false;
  }
  return true;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  SY_CHECK_GE(rank(), 1) << "Slice of a scalar";
  SY_CHECK(0 <= begin && begin <= end && end <= shape_[0])
      << "Slice [" << begin << ", " << end << ") of " << shape_.ToString();
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + DTypeBytes(dtype_, begin * strides_[0]);
  return t;
}

Tensor Tensor::Select(int64_t index) const {
  Tensor row = Slice(index, index + 1);
  std::array<int64_t, Shape::kMaxRank> dims{};
  for (int i = 1; i < rank(); ++i) dims[i - 1] = shape_[i];
  Tensor t = row;
  t.shape_ = Shape(std::span<const int64_t>(dims.data(), static_cast<size_t>(rank() - 1)));
  for (int i = 1; i < rank(); ++i) t.strides_[i - 1] = strides_[i];
  return t;
}

Tensor Tensor::Reshape(Shape shape) const {
  SY_CHECK(is_contiguous()) << "Reshape of a non-contiguous tensor";
  SY_CHECK_EQ(shape.numel(), numel())
      << "Reshape " << shape_.ToString() << " -> " << shape.ToString();
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = shape.ContiguousStrides();
  return t;
}

std::string Tensor::ToString() const {
  return std::string(DTypeName(dtype_)) + shape_.ToString() + " on " + device_.ToString();
}

}  // namespace sy
