// RunSwigluExpert: one routed expert on rows already routed to it, on any backend:
//   y = (silu(x Wg^T) * (x Wu^T)) Wd^T
// the math of LocalExpertCompute (runtime/model/expert_compute.h) for a single expert, with the
// weights in separate chunk tensors (a DeviceExpertCache slot, or host memory for the CPU
// executor) instead of stacked [E, ...] tensors.
//
// x f32 [s, H], y f32 [s, H] (overwritten); w_gate, w_up [I, H], w_down [H, I] in f32, bf16 or
// f16; all on `backend`'s device. Enqueued on the compute stream; the [s, I] intermediates come
// from backend.Allocate (ResourceExhausted past the device budget).
// Thread-safety: as the Backend's operators.
#pragma once

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy::offload {

Status RunSwigluExpert(Backend& backend, const Tensor& w_gate, const Tensor& w_up,
                       const Tensor& w_down, const Tensor& x, const Tensor& y);

}  // namespace sy::offload
