// TokenLogprob: how likely the model found a generated token, as the OpenAI API's logprobs report
// it: the log-probability of the token drawn and of the `top` most likely tokens at that step,
// from the log-softmax of the model's own logits (before temperature, penalties, top-k/top-p and
// min-p, as vLLM's and OpenAI's are).
//
// Ownership: values. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace sy {

inline constexpr int kMaxTopLogprobs = 20;  // as the OpenAI API

struct TokenLogprob {
  float logprob = 0.0f;                        // of the token drawn
  std::vector<std::pair<int32_t, float>> top;  // most likely first; ties: lower id first
};

// The log-softmax of `logits` (computed in double; NaN counts as -inf) at `token`, and the `top`
// (0 .. kMaxTopLogprobs) most likely tokens. `token` must index `logits` (checked).
TokenLogprob ComputeTokenLogprob(std::span<const float> logits, int32_t token, int top);

}  // namespace sy
