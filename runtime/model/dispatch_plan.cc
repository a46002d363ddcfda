#include "runtime/model/dispatch_plan.h"

#include <cmath>

#include "runtime/core/check.h"

namespace sy {

int64_t ExpertCapacity(double capacity_factor, int64_t num_tokens, int top_k, int num_experts) {
  if (capacity_factor <= 0.0) return -1;
  // The product is exact in double for any realistic size; the tiny slack keeps a factor like
  // 1.25 on 8 slots at exactly 10 instead of 10.000000000000002 -> 11.
  double c = capacity_factor * static_cast<double>(num_tokens) * top_k / num_experts;
  return static_cast<int64_t>(std::ceil(c - 1e-9));
}

DispatchPlan BuildDispatchPlan(std::span<const int32_t> slot_experts, int64_t num_tokens, int top_k,
                               int num_experts, double capacity_factor) {
  SY_CHECK_EQ(static_cast<int64_t>(slot_experts.size()), num_tokens * top_k);
  DispatchPlan plan;
  plan.num_tokens = num_tokens;
  plan.top_k = top_k;
  plan.num_experts = num_experts;
  plan.capacity = ExpertCapacity(capacity_factor, num_tokens, top_k, num_experts);
  plan.routed.assign(static_cast<size_t>(num_experts), 0);
  plan.group_rows.assign(static_cast<size_t>(num_experts), 0);

  // Counting sort by expert, stable in slot order; a slot is kept while its expert has room.
  std::vector<uint8_t> kept(slot_experts.size(), 0);
  for (size_t s = 0; s < slot_experts.size(); ++s) {
    const int32_t e = slot_experts[s];
    SY_CHECK(e >= 0 && e < num_experts)
        << "slot " << s << " routed to expert " << e << " of " << num_experts;
    ++plan.routed[static_cast<size_t>(e)];
    if (plan.capacity < 0 || plan.group_rows[static_cast<size_t>(e)] < plan.capacity) {
      ++plan.group_rows[static_cast<size_t>(e)];
      kept[s] = 1;
    }
  }
  std::vector<int64_t> next(static_cast<size_t>(num_experts), 0);
  int64_t rows = 0;
  for (int e = 0; e < num_experts; ++e) {
    next[static_cast<size_t>(e)] = rows;
    rows += plan.group_rows[static_cast<size_t>(e)];
  }
  plan.row_token.resize(static_cast<size_t>(rows));
  plan.row_slot.resize(static_cast<size_t>(rows));
  for (size_t s = 0; s < slot_experts.size(); ++s) {
    if (!kept[s]) continue;
    const auto r = static_cast<size_t>(next[static_cast<size_t>(slot_experts[s])]++);
    plan.row_token[r] = static_cast<int32_t>(static_cast<int64_t>(s) / top_k);
    plan.row_slot[r] = static_cast<int32_t>(s);
  }
  return plan;
}

}  // namespace sy
