// ExpertCompute: the SwiGLU experts of one MoE layer, applied to token rows already grouped by
// expert, and its backward.
//
// Note [expert parallelism]. The MoE layer calls ExpertCompute between Permute and Unpermute
// (runtime/model/moe_layer.h): it passes rows grouped by global expert id with per-expert counts
// and gets back one output row per input row, in the same order. LocalExpertCompute runs every
// expert here with grouped GEMMs. An expert-parallel implementation (parallel/) implements the
// same interface as dispatch all-to-all -> local grouped GEMM -> combine all-to-all. The router,
// the capacity rule and the permutation stay unchanged.
//
// LocalExpertCompute. The weights of expert e are
//   experts/layer{L}/expert{e}/w_gate [I, H], w_up [I, H], w_down [H, I]
// (views into stacked [E, I, H] / [E, H, I] tensors, which the grouped GEMM reads directly).
//   y_r = (silu(x_r Wg_e^T) * (x_r Wu_e^T)) Wd_e^T   for each row r of expert e.
// Parameter gradients accumulate; an expert that receives no rows gets exactly zero added.
//
// Note [routing hook]. Just before Forward the MoE layer shows the implementation what it routed
// (ExpertRouting: the layer's input rows, each slot's expert, the plan and, when the layer holds a
// pre-gate, the next MoE layer's routing logits). Training implementations ignore it (the default);
// inference expert providers (inference/expert_provider.h) fetch or prefetch experts from it.
//
// Note [before-forward hook]. LocalExpertCompute::set_before_forward installs a callback that
// Forward runs first, with the decoder layer, the first global expert of this compute and the rows
// each of its experts is about to compute (after the expert-parallel exchange of the counts, so
// on an EP rank these are the rows its own experts receive from every rank). The training expert
// store (launcher/training/expert_state_store.h) brings the activated experts' weights up to date
// there; an error from the hook fails the Forward.
//
// Note [bound experts]. LocalExpertCompute::CreateBound makes the same computation without weights
// of its own: nothing is allocated or registered, and each Forward asks an ExpertWeightSource for
// the weights of the experts that have rows (BoundExperts: stacked in expert order, with their
// gradients, and the group rows of those experts only; the input rows of the others are none, so
// the row order is unchanged). Backward accumulates into the bound gradients. Training on the
// expert store (launcher/training/expert_working_set.h) binds the step's activated experts this
// way, so the model holds no weights of the experts a step does not compute.
//
// Ownership: holds parameter views (or, bound, the views its source gives, until Release) and,
// between Forward and Release, views of its activations.
// Thread-safety: as the Backend's operators.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/dispatch_plan.h"
#include "runtime/model/parameter_store.h"

namespace sy {

// What an MoE layer routed, shown to its ExpertCompute before Forward. Views, valid for the call.
struct ExpertRouting {
  Tensor h;                               // [N, H] the layer's input rows, on the backend
  std::span<const int32_t> slot_experts;  // [N * k] host: the expert of slot n*k + j
  const DispatchPlan* plan = nullptr;     // rows per expert (routed, and kept after capacity)
  Tensor next_pregate_logits;             // [N, E] when the layer holds a pre-gate, else undefined
};

// The name of expert `expert`'s weight `weight` (w_gate, w_up, w_down) of decoder layer `layer`.
std::string ExpertParameterName(int layer, int expert, std::string_view weight);

// Note [bound experts]: the weights one Forward and its Backward compute with.
struct BoundExperts {
  // [A, I, H], [A, I, H], [A, H, I] for the A experts with rows; the gradients f32, same shapes,
  // accumulated into by Backward.
  Tensor w_gate, w_up, w_down;
  Tensor dw_gate, dw_up, dw_down;
  std::vector<int64_t> group_rows;  // [A]: the rows of each bound expert, in the same order
};

// Gives a bound LocalExpertCompute its weights (Note [bound experts]).
class ExpertWeightSource {
 public:
  virtual ~ExpertWeightSource() = default;
  // The experts of decoder layer `layer` with global ids first_expert + i for which
  // group_rows[i] > 0, in that order, with their rows; an error fails the Forward.
  virtual Result<BoundExperts> Bind(int layer, int first_expert,
                                    std::span<const int64_t> group_rows) = 0;
};

class ExpertCompute {
 public:
  virtual ~ExpertCompute() = default;
  // The routing of the coming Forward (Note [routing hook]). Default: ignored.
  virtual Status Routed(Backend& backend, const ExpertRouting& routing) {
    (void)backend;
    (void)routing;
    return Status::Ok();
  }
  // xs [R, H]: rows grouped by expert, group_rows[e] rows for expert e (sum = R). ys [R, H] is
  // overwritten.
  virtual Status Forward(Backend& backend, const Tensor& xs, std::span<const int64_t> group_rows,
                         const Tensor& ys) = 0;
  // d_ys [R, H] -> d_xs [R, H] (overwritten); accumulates the expert weight gradients.
  virtual Status Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) = 0;
  virtual void Release() = 0;
};

// The expert computation of an MoE layer built without its routed experts
// (ModelOptions::routed_experts = false): every call fails with FailedPrecondition saying that
// an expert provider must bring the experts. Zero rows succeed (nothing to compute).
class AbsentExpertCompute final : public ExpertCompute {
 public:
  explicit AbsentExpertCompute(int layer) : layer_(layer) {}
  Status Forward(Backend& backend, const Tensor& xs, std::span<const int64_t> group_rows,
                 const Tensor& ys) override;
  Status Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) override;
  void Release() override {}

 private:
  Status Missing() const;
  int layer_;
};

// The storage dtypes of an expert's three matrices. They may differ (a Q4_K_M GGUF keeps some
// layers' down projections in Q6_K): each is one the grouped GEMM takes.
struct ExpertMatrixDTypes {
  DType gate = DType::kF32;
  DType up = DType::kF32;
  DType down = DType::kF32;
  static ExpertMatrixDTypes All(DType dtype) { return {dtype, dtype, dtype}; }
  bool operator==(const ExpertMatrixDTypes&) const = default;
};

class LocalExpertCompute final : public ExpertCompute {
 public:
  // Registers the experts of decoder layer `layer` in `store`, expert by expert: `num_experts`
  // experts with global ids first_expert .. first_expert + num_experts - 1 (an expert-parallel
  // rank holds a contiguous range; group i of Forward's group_rows is expert first_expert + i).
  // Each matrix is stored in its own dtype of `weight_dtypes`.
  static Result<std::unique_ptr<LocalExpertCompute>> Create(Backend& backend, ParameterStore& store,
                                                            int layer, int num_experts,
                                                            int64_t hidden, int64_t intermediate,
                                                            ExpertMatrixDTypes weight_dtypes,
                                                            bool with_grad, int first_expert = 0);
  // Note [bound experts]: `num_experts` experts from first_expert on, without weights; Forward
  // fails until set_weight_source names where they come from.
  static std::unique_ptr<LocalExpertCompute> CreateBound(int layer, int num_experts,
                                                         int first_expert = 0);

  Status Forward(Backend& backend, const Tensor& xs, std::span<const int64_t> group_rows,
                 const Tensor& ys) override;
  Status Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) override;
  void Release() override;

  // Note [before-forward hook]. An empty function removes it.
  using BeforeForward =
      std::function<Status(int layer, int first_expert, std::span<const int64_t> group_rows)>;
  void set_before_forward(BeforeForward hook) { before_forward_ = std::move(hook); }
  // Note [bound experts]: borrowed; must outlive the Forward and Backward calls. Bound only.
  void set_weight_source(ExpertWeightSource* source);
  bool bound() const { return bound_; }
  int layer() const { return layer_; }
  int first_expert() const { return first_expert_; }

  // Stacked weights: w_gate, w_up [E, I, H]; w_down [E, H, I]. Undefined when bound.
  const Tensor& w_gate() const { return w_gate_; }
  const Tensor& w_up() const { return w_up_; }
  const Tensor& w_down() const { return w_down_; }

 private:
  LocalExpertCompute() = default;

  int layer_ = 0;
  int first_expert_ = 0;
  int num_experts_ = 0;
  bool bound_ = false;
  BeforeForward before_forward_;
  ExpertWeightSource* source_ = nullptr;
  // Owned stacked weights and gradients (undefined when bound).
  Tensor w_gate_, w_up_, w_down_;
  Tensor dw_gate_, dw_up_, dw_down_;
  // What the current Forward computes with: the owned tensors, or the source's (until Release).
  BoundExperts cur_;
  Tensor xs_, g_, u_, act_;
};

}  // namespace sy
