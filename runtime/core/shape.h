// Shape: the dimensions of a tensor, up to kMaxRank, stored inline (no allocation).
// Thread-safety: a value type.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace sy {

class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const;
  int64_t& operator[](int i);
  int64_t numel() const;  // 1 for rank 0
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }

  // Row-major (C-order) strides in elements.
  std::array<int64_t, kMaxRank> ContiguousStrides() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string ToString() const;  // "[2, 3, 4]"

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace sy
