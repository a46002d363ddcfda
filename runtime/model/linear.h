// Linear: y = x W^T (+ b) with W in the Hugging Face layout [out, in], and its backward.
//
// A Linear holds views of its parameters (registered in a ParameterStore by Create) and no
// activations: the caller keeps x for the backward. Gradients accumulate (dW += dy^T x,
// db += sum over rows of dy), so micro-batches add up until ParameterStore::ZeroGrads.
//
// Ownership: views only; the ParameterStore's tensors outlive it. Thread-safety: as the Backend's
// operators (compute stream).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/parameter_store.h"

namespace sy {

class Linear {
 public:
  Linear() = default;

  // Registers `weight_name` [out, in] (dtype `weight_dtype`) and, when bias_name is not empty,
  // `bias_name` [out] (f32, initialised to zero). Gradients only when with_grad.
  static Result<Linear> Create(Backend& backend, ParameterStore& store,
                               const std::string& weight_name, const std::string& bias_name,
                               int64_t in_features, int64_t out_features, DType weight_dtype,
                               bool with_grad, int layer);
  // A Linear over existing tensors (w [out, in], optional b [out] and grads).
  Linear(Tensor w, Tensor dw, Tensor b, Tensor db);

  int64_t in_features() const { return w_.dim(1); }
  int64_t out_features() const { return w_.dim(0); }
  const Tensor& weight() const { return w_; }
  const Tensor& weight_grad() const { return dw_; }

  // x [N, in] -> y [N, out].
  Status Forward(Backend& backend, const Tensor& x, const Tensor& y) const;
  // Given x [N, in] (the forward input) and dy [N, out]: dx = dx_beta * dx + dy W (skipped when
  // dx is undefined), and accumulates dW and db.
  Status Backward(Backend& backend, const Tensor& x, const Tensor& dy, const Tensor& dx,
                  float dx_beta) const;

 private:
  Tensor w_, dw_, b_, db_;
};

}  // namespace sy
