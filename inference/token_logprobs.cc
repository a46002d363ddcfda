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
  // The `top` most likely in one pass, kept sorted in a list of at most kMaxTopLogprobs: no
  // vocabulary-sized allocation per token on the engine thread.
  auto more_likely = [&](int32_t a, int32_t b) {
    const double va = value(static_cast<size_t>(a)), vb = value(static_cast<size_t>(b));
    return va > vb || (va == vb && a < b);
  };
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(top) + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (best.size() == static_cast<size_t>(top) && !more_likely(id, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), id, more_likely), id);
    if (best.size() > static_cast<size_t>(top)) best.pop_back();
  }
  out.top.reserve(best.size());
  for (const int32_t id : best) out.top.emplace_back(id, logprob(static_cast<size_t>(id)));
  return out;
}

}  // namespace sy
