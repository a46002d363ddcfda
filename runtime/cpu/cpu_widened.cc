#include "runtime/cpu/cpu_widened.h"

#include <utility>

#include "runtime/core/check.h"

namespace sy::cpu {
namespace {

bool IsSixteenBit(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::kBF16 || t.dtype() == DType::kF16);
}

}  // namespace

bool AnySixteenBit(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (IsSixteenBit(*t)) return true;
  }
  return false;
}

Tensor Widened::Wide(const Tensor& t) {
  Result<Tensor> wide = backend_.Allocate(DType::kF32, t.shape());
  SY_CHECK(wide.ok()) << "widening " << t.ToString() << " to f32: " << wide.status().ToString();
  return std::move(wide).value();
}

Tensor Widened::In(const Tensor& t) {
  if (!IsSixteenBit(t)) return t;
  Tensor wide = Wide(t);
  backend_.Convert(t, wide);
  return wide;
}

Tensor Widened::Out(const Tensor& t, bool accumulate) {
  if (!IsSixteenBit(t)) return t;
  Tensor wide = accumulate ? In(t) : Wide(t);
  outputs_.emplace_back(wide, t);
  return wide;
}

Widened::~Widened() {
  for (const auto& [wide, narrow] : outputs_) backend_.Convert(wide, narrow);
}

}  // namespace sy::cpu
