// DispatchPlan: the host-side bookkeeping of one MoE layer's routing. It sorts token-slots by
// expert, applies the capacity limit, and says which rows the grouped GEMM sees.
//
// A token-slot s = n*k + j is token n's j-th choice. Rows are grouped by expert (expert 0 first).
// Within an expert they are in slot order, which is token order because the k experts of a token
// are distinct.
//
// Capacity. With capacity_factor > 0, each expert keeps at most
// ceil(capacity_factor * N * k / E) slots: the first ones in token order. It drops the rest,
// which then contribute nothing to the output and get no gradient. capacity_factor = 0 is
// dropless.
// Thread-safety: a value type; BuildDispatchPlan is a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace sy {

struct DispatchPlan {
  int64_t num_tokens = 0;
  int top_k = 0;
  int num_experts = 0;
  int64_t capacity = -1;            // per-expert slot limit; -1 = dropless
  std::vector<int64_t> routed;      // [E] slots routed to each expert, before the capacity drop
  std::vector<int64_t> group_rows;  // [E] slots each expert computes (after the drop)
  std::vector<int32_t> row_token;   // [R] the token of each row
  std::vector<int32_t> row_slot;    // [R] the slot (n*k + j) of each row

  int64_t num_rows() const { return static_cast<int64_t>(row_token.size()); }
  int64_t num_dropped() const { return num_tokens * top_k - num_rows(); }
};

// ceil(capacity_factor * num_tokens * top_k / num_experts), or -1 when capacity_factor == 0.
int64_t ExpertCapacity(double capacity_factor, int64_t num_tokens, int top_k, int num_experts);

// slot_experts [N*k]: the expert of each slot, each in [0, num_experts) (checked).
DispatchPlan BuildDispatchPlan(std::span<const int32_t> slot_experts, int64_t num_tokens, int top_k,
                               int num_experts, double capacity_factor);

}  // namespace sy
