// Tensor: a typed, shaped view of memory on one device.
//
// A Tensor either shares ownership of a Buffer (the allocation, which carries its device) or is a
// non-owning view of memory someone else keeps alive (Tensor::Wrap). Views (Slice, Reshape)
// share the Buffer of their source. Copying a Tensor copies the view, never the data.
//
// Strides are in elements, row-major by default. A quantized tensor (runtime/core/dtype.h) holds
// whole blocks in each row of its last dimension; Slice along dimension 0 keeps whole rows.
// Operators in runtime/backend require contiguous tensors and check it.
//
// data<T>() returns a raw pointer; host code may dereference it only when device().is_host().
// Thread-safety: a Tensor value may be read from many threads; writes to the underlying memory
// are ordered by the caller (streams and events for device memory).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "runtime/core/buffer.h"
#include "runtime/core/check.h"
#include "runtime/core/dtype.h"
#include "runtime/core/shape.h"

namespace sy {

class Tensor {
 public:
  Tensor() = default;

  // A tensor over `buffer`, starting `offset_bytes` in, contiguous.
  Tensor(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape, size_t offset_bytes = 0);

  // A non-owning contiguous view of `data`, which must outlive every use of the view.
  static Tensor Wrap(void* data, DType dtype, Shape shape, Device device = Device::Cpu());

  // A new zero-filled contiguous tensor in host memory. Aborts if the host is out of memory: for
  // sizes a program fixes itself. Sizes that come from input (a config, a file, a flag) use
  // TryHost.
  static Tensor Host(DType dtype, Shape shape);
  // As Host, but ResourceExhausted (naming the shape and the bytes) when the memory cannot be
  // had, including a size past what the address space can hold.
  static Result<Tensor> TryHost(DType dtype, Shape shape);

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return DTypeBytes(dtype_, numel()); }
  const Device& device() const { return device_; }
  int64_t stride(int i) const;
  bool is_contiguous() const;
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  void* data() const { return data_; }
  template <typename T>
  T* data() const {
    SY_CHECK(DTypeOf<T>::value == dtype_)
        << "data<" << DTypeName(DTypeOf<T>::value) << "> on a " << DTypeName(dtype_) << " tensor";
    return static_cast<T*>(data_);
  }

  // Rows [begin, end) of dimension 0, sharing memory.
  Tensor Slice(int64_t begin, int64_t end) const;
  // Element `index` of dimension 0, with that dimension removed.
  Tensor Select(int64_t index) const;
  // The same contiguous memory under another shape of equal numel.
  Tensor Reshape(Shape shape) const;

  std::string ToString() const;  // "f32[2, 3] on cpu"

 private:
  std::shared_ptr<Buffer> buffer_;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::array<int64_t, Shape::kMaxRank> strides_{};
  Device device_;
};

}  // namespace sy
