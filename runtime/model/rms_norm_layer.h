// RmsNormLayer: y = x / sqrt(mean(x^2) + eps) * weight over the last dimension, with a learned
// weight, and its backward. Used for the input / post-attention / final norms and for q/k norms.
//
// Forward keeps views of x and of the per-row rstd for Backward (Release drops them). The weight
// gradient accumulates.
//
// Ownership: parameter views from a ParameterStore; saved activations share their buffers.
// Thread-safety: as the Backend's operators (compute stream).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/parameter_store.h"

namespace sy {

class RmsNormLayer {
 public:
  RmsNormLayer() = default;
  // Registers `name` [dim] (initialised to ones).
  static Result<RmsNormLayer> Create(Backend& backend, ParameterStore& store,
                                     const std::string& name, int64_t dim, DType weight_dtype,
                                     bool with_grad, int layer, float eps);

  // x [R, dim] -> out [R, dim].
  Status Forward(Backend& backend, const Tensor& x, const Tensor& out);
  // dout [R, dim] -> dx [R, dim] (overwritten); accumulates the weight gradient.
  Status Backward(Backend& backend, const Tensor& dout, const Tensor& dx);
  void Release();

  const Tensor& weight() const { return w_; }

 private:
  Tensor w_, dw_;
  float eps_ = 1e-6f;
  Tensor x_, rstd_;
};

}  // namespace sy
