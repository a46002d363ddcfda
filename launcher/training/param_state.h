// ParamState: one parameter as the trainer steps it: its fp32 master value and its gradient on
// the host, and the optimizer's state for it.
//
// On a host backend host_value and host_grad alias the parameter's own tensors (the model's f32
// parameters are the masters, updated in place); on another backend they are host copies, and
// the trainer copies the gradient down after Backward and the updated value back up after the
// optimizer step, except where the optimizer steps on the GPU (launcher/training/device_adam.h):
// there host_grad is left undefined and host_value, m and v are filled only for a checkpoint.
//
// Mixed precision (train.precision bf16 or f16): a parameter held in 16 bits (its value is the
// compute copy: Note [mixed precision] in runtime/model/moe_model.h) keeps its f32 master in
// host_value, a tensor of its own, and host_compute is where the optimizer writes the rounded
// update in the same pass (optim/optimizer.h, ComputeCopy): the parameter's value itself on a
// host backend, a host staging tensor that the trainer copies up (half the bytes) otherwise.
// host_compute is undefined for an f32 parameter.
//
// Ownership: a value type; `param` points into the model's ParameterStore (distributed: into the
// rank's own expert store for an expert), which outlives it. Thread-safety: none; the trainer's
// thread.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/model/parameter_store.h"

namespace sy::launcher {

struct ParamState {
  Parameter* param = nullptr;
  Tensor host_value;        // the fp32 master
  Tensor host_grad;         // fp32, same shape
  Tensor host_compute;      // the 16-bit compute copy the optimizer writes, or undefined
  std::vector<float> m, v;  // the optimizer's moments; empty when it keeps no such moment
  int64_t opt_step = 0;     // the optimizer's step count for this parameter
};

}  // namespace sy::launcher
