#include "runtime/model/dense_matrices.h"

#include <algorithm>
#include <string_view>

namespace sy {

std::vector<DenseMatrix> DenseMatrices(const ModelConfig& config) {
  std::vector<DenseMatrix> out;
  const int64_t h = config.hidden_size;
  const int64_t q_out = int64_t{config.num_heads} * config.dim_per_head();
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string p = "layers/" + std::to_string(l) + "/";
    for (const char* w : {"wq", "wk", "wv"}) out.push_back({p + "attn/" + w, h});
    out.push_back({p + "attn/wo", q_out});
    if (!config.IsMoeLayer(l)) {
      out.push_back({p + "mlp/w_gate", h});
      out.push_back({p + "mlp/w_up", h});
      out.push_back({p + "mlp/w_down", config.intermediate_size});
    } else if (config.num_shared_experts > 0) {
      out.push_back({p + "moe/shared_experts/w_gate", h});
      out.push_back({p + "moe/shared_experts/w_up", h});
      out.push_back({p + "moe/shared_experts/w_down", config.shared_intermediate()});
    }
  }
  if (!config.tie_word_embeddings) out.push_back({"lm_head", h});
  return out;
}

std::string DescribeMatrixDTypes(const std::map<std::string, DType>& matrix_dtypes) {
  std::map<std::string_view, int> count;
  for (const auto& [name, dtype] : matrix_dtypes) ++count[DTypeName(dtype)];
  std::string text;
  for (const auto& [dtype, n] : count) {
    text +=
        (text.empty() ? ", dense matrices " : ", ") + std::string(dtype) + " x" + std::to_string(n);
  }
  return text;
}

Status CheckMatrixDTypes(const Backend& backend, const ModelConfig& config,
                         const std::map<std::string, DType>& matrix_dtypes, bool with_grad) {
  if (matrix_dtypes.empty()) return Status::Ok();
  const std::vector<DenseMatrix> dense = DenseMatrices(config);
  for (const auto& entry : matrix_dtypes) {
    const std::string& name = entry.first;  // a named reference: clang 14 cannot capture a binding
    const DType dtype = entry.second;
    const std::string what =
        "model options: matrix_dtypes[\"" + name + "\"] = " + std::string(DTypeName(dtype));
    auto it = std::find_if(dense.begin(), dense.end(),
                           [&](const DenseMatrix& m) { return m.name == name; });
    if (it == dense.end()) {
      return InvalidArgumentError(what +
                                  ": not a dense matrix of this model (attention projections, "
                                  "dense or shared-expert FFN, untied lm_head); routers, "
                                  "embeddings and norms stay in weight_dtype");
    }
    const bool plain = dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
    if (!plain && !IsQuantized(dtype)) {
      return InvalidArgumentError(
          what + ": expected f32, bf16, f16, q8_0, q4_0, q2_k, q3_k, q4_k, q5_k or q6_k");
    }
    if (with_grad && dtype != DType::kF32) {
      return InvalidArgumentError(what + " is forward-only; set with_grad = false");
    }
    if (!IsQuantized(dtype)) continue;
    if (it->in_features % DTypeBlockSize(dtype) != 0) {
      return InvalidArgumentError(what + ": rows of " + std::to_string(it->in_features) +
                                  " values are not whole blocks of " +
                                  std::to_string(DTypeBlockSize(dtype)) +
                                  "; keep it in a float dtype or pick q8_0 / q4_0 (blocks of 32)");
    }
    if (!backend.caps().quantized_weights) {
      return InvalidArgumentError(what + ": the " + backend.name() +
                                  " backend has no kernels for quantized weights; load the "
                                  "matrices in a float dtype, or run on the cpu device");
    }
  }
  return Status::Ok();
}

}  // namespace sy
