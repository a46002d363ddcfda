// The dense weight matrices of a model: the single [out, in] matrices that only Linear::Forward
// reads in a forward pass, so that a forward-only model may hold each in a dtype of its own
// (ModelOptions::matrix_dtypes, runtime/model/moe_model.h), quantized included.
//
// They are the attention projections (layers/L/attn/{wq,wk,wv,wo}), the dense FFNs
// (layers/L/mlp/{w_gate,w_up,w_down}), the shared experts' FFN
// (layers/L/moe/shared_experts/{w_gate,w_up,w_down}) and the LM head (lm_head, absent when tied).
// Linear::Forward computes them with Backend::Gemm (trans_b), which takes q8_0, q4_0 and the
// k-quants weights where Backend::caps().quantized_weights (cpu, sim; not cuda). Not listed, and so
// always in ModelOptions::weight_dtype: the routers and pre-gates (their logits pick the experts,
// and llama.cpp's quantizer keeps them unquantized too), the shared-expert gate, the embeddings (a
// gather, not a GEMM; a tied LM head reads the embedding table), the norms and the biases.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/model/model_config.h"

namespace sy {

struct DenseMatrix {
  std::string name;         // the parameter name (runtime/model/parameter_store.h)
  int64_t in_features = 0;  // the length of a row: a quantized dtype needs whole blocks of it
};

// Every dense matrix of a model with `config`, in registration order.
std::vector<DenseMatrix> DenseMatrices(const ModelConfig& config);

// ", dense matrices q4_0 x24, q8_0 x25" (how many of each dtype), or "" when there are none: for
// the line a command prints about the model it loaded.
std::string DescribeMatrixDTypes(const std::map<std::string, DType>& matrix_dtypes);

// Checks ModelOptions::matrix_dtypes: every name is one of DenseMatrices(config); every dtype is
// f32, bf16, f16, q8_0, q4_0 or a k-quant (q2_k ... q6_k); anything but f32 needs !with_grad; a
// quantized dtype needs the matrix's in-features to be whole blocks and `backend` to take quantized
// weights. InvalidArgument naming the matrix and the fix otherwise.
Status CheckMatrixDTypes(const Backend& backend, const ModelConfig& config,
                         const std::map<std::string, DType>& matrix_dtypes, bool with_grad);

}  // namespace sy
