// SwigluMlp: y = (silu(x Wg^T) * (x Wu^T)) Wd^T, the dense FFN of non-MoE layers and the fused
// shared experts of MoE layers, and its backward.
//
// Weights (HF layout): {prefix}w_gate [I, H], {prefix}w_up [I, H], {prefix}w_down [H, I].
// Forward keeps x, the gate and up projections and the activation; Release drops them. Parameter
// gradients accumulate.
// Ownership: parameter views from a ParameterStore. Thread-safety: as the Backend's operators.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/linear.h"
#include "runtime/model/parameter_store.h"

namespace sy {

class SwigluMlp {
 public:
  SwigluMlp() = default;
  // Registers {prefix}w_gate, {prefix}w_up, {prefix}w_down.
  static Result<SwigluMlp> Create(Backend& backend, ParameterStore& store,
                                  const std::string& prefix, int64_t hidden, int64_t intermediate,
                                  DType weight_dtype, bool with_grad, int layer);

  // x [N, H] -> y [N, H].
  Status Forward(Backend& backend, const Tensor& x, const Tensor& y);
  // dy [N, H] -> dx = dx_beta * dx + d(y)/d(x)^T dy.
  Status Backward(Backend& backend, const Tensor& dy, const Tensor& dx, float dx_beta);
  void Release();

 private:
  Linear gate_, up_, down_;
  Tensor x_, g_, u_, act_;
};

}  // namespace sy
