// SharedExperts: the always-active experts of an MoE layer (DeepSeek-MoE, Qwen2-MoE), fused into
// one SwiGLU MLP, with Qwen2-MoE's optional per-token sigmoid gate, and the backward.
//
//   s = SwigluMlp(h)                 width num_shared_experts * shared_expert_intermediate_size
//   out += s                         without the gate
//   out += sigmoid(h . w) * s        with shared_expert_gate, w = layers/{L}/moe/shared_expert_gate
//                                    [1, H]
// The backend has no sigmoid, so sigmoid(a) is computed as softmax([a, 0])[0], which is the same
// function; its backward is the softmax backward.
//
// Ownership: parameter views; activations until Release. Thread-safety: as the Backend's
// operators.
#pragma once

#include <cstdint>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/linear.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_store.h"
#include "runtime/model/swiglu_mlp.h"

namespace sy {

class SharedExperts {
 public:
  SharedExperts() = default;
  static Result<SharedExperts> Create(Backend& backend, ParameterStore& store,
                                      const ModelConfig& config, int layer, DType weight_dtype,
                                      bool with_grad);

  // h [N, H]; adds the shared output into out [N, H] (accumulates).
  Status Forward(Backend& backend, const Tensor& h, const Tensor& out);
  // dout [N, H]; adds the gradient wrt h into dh (accumulates).
  Status Backward(Backend& backend, const Tensor& dout, const Tensor& dh);
  void Release();

 private:
  SwigluMlp mlp_;
  bool gated_ = false;
  Linear gate_;  // [1, H]
  Tensor h_, s_, pair_probs_, sig_, even_, rows_;
};

}  // namespace sy
