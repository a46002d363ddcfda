#include "inference/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/check.h"

namespace sy {

TokenLogprob ComputeTokenLogprob(std::span<const float> logits, int32_t token, int top) {
  SY_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size())
      << "token " << token << " outside the " << logits.size() << " logits";
  SY_CHECK(top >= 0 && top <= kMaxTopLogprobs) << "top " << top;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  auto value = [&](size_t i) {
    const double v = logits[i];
    return std::isnan(v) ? kNegInf : v;
  };
  double max = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) max = std::max(max, value(i));
  double sum = 0.0;
  if (std::isfinite(max)) {
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(value(i) - max);
  }
  const double log_total = std::isfinite(max) ? max + std::log(sum) : 0.0;
  auto logprob = [&](size_t i) { return static_cast<float>(value(i) - log_total); };

  TokenLogprob out;
  out.logprob = logprob(static_cast<size_t>(token));
  if (top == 0) return out;
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  const size_t k = std::min(static_cast<size_t>(top), ids.size());
  auto more_likely = [&](int32_t a, int32_t b) {
    const double va = value(static_cast<size_t>(a)), vb = value(static_cast<size_t>(b));
    return va > vb || (va == vb && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(), more_likely);
  out.top.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    out.top.emplace_back(ids[i], logprob(static_cast<size_t>(ids[i])));
  }
  return out;
}

}  // namespace sy
