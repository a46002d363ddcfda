#include "runtime/model/sigmoid_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/core/check.h"

namespace sy {
namespace {

// Indices of the k largest of values, descending; equal values keep the lower index first, and a
// NaN (a broken model) ranks below every number, so the order stays a strict weak one.
void TopIndices(std::span<const float> values, int k, std::vector<int32_t>& order) {
  auto rank = [&](int32_t i) {
    const float v = values[static_cast<size_t>(i)];
    return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
  };
  order.resize(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return rank(a) > rank(b) || (rank(a) == rank(b) && a < b);
  });
  order.resize(static_cast<size_t>(k));
}

}  // namespace

SigmoidRouting SigmoidRoute(std::span<const float> logits, std::span<const float> bias,
                            const SigmoidRoutingOptions& o) {
  const int e = o.num_experts;
  const int k = o.top_k;
  SY_CHECK(e > 0 && k >= 1 && k <= e) << "sigmoid routing: top_k " << k << " of " << e;
  SY_CHECK(o.num_groups >= 1 && e % o.num_groups == 0 && o.topk_groups >= 1 &&
           o.topk_groups <= o.num_groups)
      << "sigmoid routing: " << o.topk_groups << " of " << o.num_groups << " groups, " << e
      << " experts";
  const int per_group = e / o.num_groups;
  SY_CHECK(o.num_groups == 1 || per_group >= 2) << "sigmoid routing: groups of one expert";
  SY_CHECK(logits.size() % static_cast<size_t>(e) == 0) << "sigmoid routing logits";
  SY_CHECK(bias.empty() || bias.size() == static_cast<size_t>(e)) << "sigmoid routing bias";
  const size_t n = logits.size() / static_cast<size_t>(e);

  SigmoidRouting out;
  out.experts.resize(n * static_cast<size_t>(k));
  out.weights.resize(out.experts.size());
  std::vector<float> score(static_cast<size_t>(e)), choice(static_cast<size_t>(e));
  std::vector<float> group_worth(static_cast<size_t>(o.num_groups));
  std::vector<int32_t> order, group_order;
  for (size_t t = 0; t < n; ++t) {
    const float* row = logits.data() + t * static_cast<size_t>(e);
    for (int i = 0; i < e; ++i) {
      const float s = 1.0f / (1.0f + std::exp(-row[i]));
      score[static_cast<size_t>(i)] = s;
      choice[static_cast<size_t>(i)] = bias.empty() ? s : s + bias[static_cast<size_t>(i)];
    }
    if (o.topk_groups < o.num_groups) {
      for (int g = 0; g < o.num_groups; ++g) {
        std::span<const float> members(choice.data() + g * per_group,
                                       static_cast<size_t>(per_group));
        TopIndices(members, 2, order);
        group_worth[static_cast<size_t>(g)] =
            members[static_cast<size_t>(order[0])] + members[static_cast<size_t>(order[1])];
      }
      TopIndices(group_worth, o.topk_groups, group_order);
      std::vector<bool> kept(static_cast<size_t>(o.num_groups), false);
      for (int32_t g : group_order) kept[static_cast<size_t>(g)] = true;
      for (int i = 0; i < e; ++i) {
        if (!kept[static_cast<size_t>(i / per_group)]) choice[static_cast<size_t>(i)] = 0.0f;
      }
    }
    TopIndices(choice, k, order);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += score[static_cast<size_t>(order[static_cast<size_t>(j)])];
    const float denominator = o.norm_topk_prob ? sum + 1e-20f : 1.0f;
    for (int j = 0; j < k; ++j) {
      const size_t slot = t * static_cast<size_t>(k) + static_cast<size_t>(j);
      const int32_t expert = order[static_cast<size_t>(j)];
      out.experts[slot] = expert;
      out.weights[slot] =
          score[static_cast<size_t>(expert)] / denominator * o.routed_scaling_factor;
    }
  }
  return out;
}

}  // namespace sy
