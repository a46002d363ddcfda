// ParamState: one parameter as the trainer steps it: its fp32 master value and its gradient on
// the host, and the optimizer's state for it.
//
// On a host backend host_value and host_grad alias the parameter's own tensors (the model's f32
// parameters are the masters, updated in place); on another backend they are host copies, and
// the trainer copies the gradient down after Backward and the updated value back up after the
// optimizer step, except where the optimizer steps on the GPU (launcher/training/device_adam.h):
// there host_grad is left undefined and host_value, m and v are filled only for a checkpoint.
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
  std::vector<float> m, v;  // the optimizer's moments; empty when it keeps no such moment
  int64_t opt_step = 0;     // the optimizer's step count for this parameter
};

}  // namespace sy::launcher
