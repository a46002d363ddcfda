// ParameterStore: the flat registry of a model's named parameters, each a value tensor and a
// gradient tensor on the model's backend.
//
// Names are stable and are the keys of checkpoints and of the optimizer's state:
//   embed_tokens                               [vocab, hidden]
//   layers/{L}/input_norm                      [hidden]
//   layers/{L}/attn/{wq,wk,wv,wo}              [out, in] (Hugging Face Linear layout)
//   layers/{L}/attn/{bq,bk,bv}                 [out]              (attention_bias)
//   layers/{L}/attn/bo                         [hidden]           (attention_out_bias)
//   layers/{L}/attn/{q_norm,k_norm}            [head_dim] or [heads * head_dim]   (qk_norm)
//   layers/{L}/post_attention_norm             [hidden]
//   layers/{L}/mlp/{w_gate,w_up,w_down}        dense FFN
//   layers/{L}/moe/gate                        [experts, hidden]  (router)
//   layers/{L}/moe/pregate                     [experts, hidden]  (pre-gate for the next MoE layer)
//   layers/{L}/moe/expert_bias                 [experts] f32      (sigmoid routing's correction
//                                                                  bias; forward-only)
//   layers/{L}/moe/shared_experts/{w_gate,w_up,w_down}
//   layers/{L}/moe/shared_expert_gate          [1, hidden]
//   experts/layer{L}/expert{E}/{w_gate,w_up}   [moe_intermediate, hidden]
//   experts/layer{L}/expert{E}/w_down          [hidden, moe_intermediate]
//   final_norm                                 [hidden]
//   lm_head                                    [vocab, hidden]    (absent when tied)
// L is the decoder-layer index and E the global expert id, so expert-parallel resharding is a
// relabelling.
//
// Ownership: the store holds views; the layers that registered them hold the same views and
// compute with them. So write new values into `value` (CopyAsync, Fill), never rebind the Tensor.
// The experts of one layer are views into one stacked [experts, ...] tensor per weight, which the
// grouped GEMM reads directly. `grad` is undefined for a forward-only model.
// Thread-safety: registration is single-threaded (model construction); afterwards the store is
// read-only and may be read from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy {

// How InitializeParameters fills a parameter.
enum class ParamInit : uint8_t {
  kNormal,  // N(0, stddev): weight matrices and embeddings
  kOnes,    // RMSNorm weights
  kZeros,   // biases
};

struct Parameter {
  std::string name;
  Tensor value;  // on the backend, in the model's weight dtype (biases always f32) or the
                 // dtype of ModelOptions::matrix_dtypes / expert_weight_dtype
  Tensor grad;   // f32, same shape; undefined when the model is forward-only
  bool is_expert = false;
  int layer = -1;   // decoder layer, or -1 (embeddings, final norm, LM head)
  int expert = -1;  // global expert id, or -1
  ParamInit init = ParamInit::kNormal;
  // A column shard (the embedding partition, parallel/embedding_partition.h): value and grad hold
  // columns [col_begin, col_begin + value.dim(1)) of a [value.dim(0), full_cols] parameter.
  // full_cols == 0 (the default): the parameter is whole.
  int64_t col_begin = 0;
  int64_t full_cols = 0;
  bool is_column_shard() const { return full_cols > 0; }
};

// The values Initialize gives a whole (not column-sharded) parameter `name` of out.size()
// values with `init`: for a parameter that is not registered anywhere (the experts of training
// on the expert store, launcher/training/expert_working_set.h), the same values it would get.
void InitialValues(std::string_view name, ParamInit init, uint64_t seed, float stddev,
                   std::span<float> out);

class ParameterStore {
 public:
  ParameterStore() = default;
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // Registers a parameter. The name must be new (checked).
  Parameter& Add(Parameter parameter);
  // Allocates value (`dtype`) and, when with_grad, an f32 grad of `shape` on the backend, and
  // registers them. Contents are uninitialised until InitializeParameters or a load.
  Result<Parameter*> Create(Backend& backend, std::string name, Shape shape, DType dtype,
                            bool with_grad, int layer, ParamInit init);
  // Create allocates the parameters named here in the dtype given instead of the one its caller
  // asks for. MoeModel sets ModelOptions::matrix_dtypes here before it builds its layers; the
  // names are dense matrices (runtime/model/dense_matrices.h), read only through Linear::Forward.
  // Default: none.
  void set_dtype_overrides(std::map<std::string, DType> overrides) {
    dtype_overrides_ = std::move(overrides);
  }
  // Create allocates values and gradients with Backend::AllocateReleasable (memory whose backing
  // ZeRO-3 drops between uses: parallel/zero3.h). MoeModel sets ModelOptions::
  // releasable_parameters here. Default: false.
  void set_releasable(bool releasable) { releasable_ = releasable; }

  // nullptr when absent.
  Parameter* Find(std::string_view name);
  const Parameter* Find(std::string_view name) const;

  // In registration order: embeddings, then layer by layer (experts of a layer after its dense
  // parameters), then the final norm and LM head. Stable across runs.
  auto begin() { return params_.begin(); }
  auto end() { return params_.end(); }
  auto begin() const { return params_.begin(); }
  auto end() const { return params_.end(); }
  size_t size() const { return params_.size(); }

  int64_t num_elements() const;         // all parameters
  int64_t num_expert_elements() const;  // expert parameters only

  // Sets every gradient to zero (on the compute stream).
  void ZeroGrads(Backend& backend);

  // Fills every parameter by its ParamInit: kNormal ~ N(0, stddev^2), kOnes, kZeros. A
  // parameter's values depend only on (seed, its name), not on what else is registered, so an
  // expert-parallel rank holding a subset of the experts gets the same values, and a column shard
  // gets its columns of the whole parameter's values. A 16-bit value gets them rounded.
  Status Initialize(Backend& backend, uint64_t seed, float stddev);
  // The f32 values Initialize gives `p` (before any rounding to p.value's dtype): the initial
  // master weights of mixed-precision training.
  static std::vector<float> InitialValuesOf(const Parameter& p, uint64_t seed, float stddev);

 private:
  std::deque<Parameter> params_;  // deque: references stay valid as parameters are added
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, DType> dtype_overrides_;
  bool releasable_ = false;
};

}  // namespace sy
