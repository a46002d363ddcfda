// TokenPermutation: the device side of a DispatchPlan. Permute gathers token rows into expert-
// grouped rows; Unpermute scatter-adds the expert outputs back to their tokens, weighted by the
// combine weights. Both come with their backward.
//
//   Permute:    xs[r]  = x[row_token[r]]                                 xs [R, H]
//   Unpermute:  out[n] = sum over rows r of token n of w[row_slot[r]] * ys[r]   (dropped slots: 0)
// Expert parallelism slots in between: the grouped rows go to their experts' ranks and come back
// in the same order (see runtime/model/expert_compute.h).
//
// Ownership: holds the uploaded index tables and, after Unpermute, views of ys and the per-row
// weights for the backward. Thread-safety: as the Backend's operators.
#pragma once

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/dispatch_plan.h"

namespace sy {

class TokenPermutation {
 public:
  // Uploads the plan's index tables. The plan must have at least one row (checked).
  Status Setup(Backend& backend, const DispatchPlan& plan);

  // x [N, H] -> xs [R, H].
  void Permute(Backend& backend, const Tensor& x, const Tensor& xs) const;
  // dx [N, H] += rows of d_xs [R, H] added back to their tokens (accumulates).
  void PermuteBackward(Backend& backend, const Tensor& d_xs, const Tensor& dx) const;

  // ys [R, H], weights [N, k] -> out [N, H] (overwritten).
  Status Unpermute(Backend& backend, const Tensor& ys, const Tensor& weights, const Tensor& out);
  // dout [N, H] -> d_ys [R, H] (overwritten) and d_weights [N, k] (overwritten; zero for
  // dropped slots).
  Status UnpermuteBackward(Backend& backend, const Tensor& dout, const Tensor& d_ys,
                           const Tensor& d_weights);
  void Release();

  int64_t num_rows() const { return row_token_.defined() ? row_token_.numel() : 0; }

 private:
  Tensor row_token_, row_slot_, rows_;  // i32 [R]; rows_ = 0..R-1
  Tensor ys_, row_weights_;             // saved by Unpermute
};

}  // namespace sy
