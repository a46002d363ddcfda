#include "runtime/core/shape.h"

#include "runtime/core/check.h"

namespace sy {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims)) {}

Shape::Shape(std::span<const int64_t> dims) {
  SY_CHECK_LE(static_cast<int>(dims.size()), kMaxRank) << "shape rank too large";
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) {
    SY_CHECK_GE(dims[i], 0) << "negative dimension";
    dims_[i] = dims[i];
  }
}

int64_t Shape::operator[](int i) const {
  SY_CHECK(i >= 0 && i < rank_) << "dimension " << i << " of rank-" << rank_ << " shape";
  return dims_[i];
}

int64_t& Shape::operator[](int i) {
  SY_CHECK(i >= 0 && i < rank_) << "dimension " << i << " of rank-" << rank_ << " shape";
  return dims_[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::array<int64_t, Shape::kMaxRank> Shape::ContiguousStrides() const {
  std::array<int64_t, kMaxRank> strides{};
  int64_t stride = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= dims_[i];
  }
  return strides;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

}  // namespace sy
