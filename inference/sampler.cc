#include "inference/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/core/check.h"

namespace sy {

Status ValidateSamplerOptions(const SamplerOptions& options) {
  if (!(options.temperature >= 0.0f && std::isfinite(options.temperature))) {
    return InvalidArgumentError("sampler.temperature is " + std::to_string(options.temperature) +
                                "; it must be finite and >= 0 (0 = greedy, 1 = unchanged)");
  }
  if (options.top_k < 0) {
    return InvalidArgumentError("sampler.top_k is " + std::to_string(options.top_k) +
                                "; it must be >= 0 (0 disables top-k)");
  }
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    return InvalidArgumentError("sampler.top_p is " + std::to_string(options.top_p) +
                                "; it must be in (0, 1] (1 disables top-p)");
  }
  if (!(options.min_p >= 0.0f && options.min_p <= 1.0f)) {
    return InvalidArgumentError("sampler.min_p is " + std::to_string(options.min_p) +
                                "; it must be in [0, 1] (0 disables min-p)");
  }
  if (!(options.repetition_penalty > 0.0f && std::isfinite(options.repetition_penalty))) {
    return InvalidArgumentError("sampler.repetition_penalty is " +
                                std::to_string(options.repetition_penalty) +
                                "; it must be finite and > 0 (1 disables it)");
  }
  for (const auto& [name, value] :
       {std::pair<const char*, float>{"presence_penalty", options.presence_penalty},
        {"frequency_penalty", options.frequency_penalty}}) {
    if (!(value >= -2.0f && value <= 2.0f)) {
      return InvalidArgumentError(std::string("sampler.") + name + " is " + std::to_string(value) +
                                  "; it must be in [-2, 2] (0 disables it)");
    }
  }
  for (const auto& [token, bias] : options.logit_bias) {
    if (token < 0 || !(bias >= -100.0f && bias <= 100.0f)) {
      return InvalidArgumentError("sampler.logit_bias holds token " + std::to_string(token) +
                                  " with bias " + std::to_string(bias) +
                                  "; token ids must be >= 0 and biases in [-100, 100]");
    }
  }
  if (options.max_new_tokens < 1) {
    return InvalidArgumentError("sampler.max_new_tokens is " +
                                std::to_string(options.max_new_tokens) + "; it must be >= 1");
  }
  for (int32_t token : options.stop_tokens) {
    if (token < 0) {
      return InvalidArgumentError("sampler.stop_tokens holds " + std::to_string(token) +
                                  "; token ids must be >= 0");
    }
  }
  return Status::Ok();
}

int32_t GreedyArgmax(std::span<const float> logits) {
  SY_CHECK(!logits.empty()) << "GreedyArgmax on an empty row";
  SY_CHECK_LE(logits.size(), static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  int64_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    // Strictly greater: the first (lowest) index wins a tie.
    if (best < 0 || logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int64_t>(i);
  }
  return best < 0 ? 0 : static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplerOptions& options, int num_sequences)
    : options_(options), histories_(static_cast<size_t>(num_sequences)) {
  generators_.reserve(static_cast<size_t>(num_sequences));
  for (int i = 0; i < num_sequences; ++i) {
    generators_.emplace_back(options.seed + static_cast<uint64_t>(i));
  }
}

Result<Sampler> Sampler::Create(const SamplerOptions& options, int num_sequences) {
  SY_RETURN_IF_ERROR(ValidateSamplerOptions(options));
  if (num_sequences < 1) {
    return InvalidArgumentError("Sampler needs num_sequences >= 1 (the batch size); got " +
                                std::to_string(num_sequences));
  }
  return Sampler(options, num_sequences);
}

void Sampler::Reseed(int sequence, uint64_t seed) {
  SY_CHECK(sequence >= 0 && sequence < num_sequences())
      << "sequence " << sequence << " outside [0, " << num_sequences() << ")";
  generators_[static_cast<size_t>(sequence)].seed(seed);
}

void Sampler::StartSequence(int sequence, std::span<const int32_t> prompt) {
  SY_CHECK(sequence >= 0 && sequence < num_sequences())
      << "sequence " << sequence << " outside [0, " << num_sequences() << ")";
  History& h = histories_[static_cast<size_t>(sequence)];
  h.answer.clear();
  h.prompt.assign(prompt.begin(), prompt.end());
  std::sort(h.prompt.begin(), h.prompt.end());
  h.prompt.erase(std::unique(h.prompt.begin(), h.prompt.end()), h.prompt.end());
}

std::span<const float> Sampler::Penalize(int sequence, std::span<const float> logits) {
  const History& h = histories_[static_cast<size_t>(sequence)];
  penalized_.assign(logits.begin(), logits.end());
  const auto vocab = static_cast<int64_t>(logits.size());
  const float repetition = options_.repetition_penalty;
  if (repetition != 1.0f) {
    auto penalize = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      float& l = penalized_[static_cast<size_t>(t)];
      l = l < 0.0f ? l * repetition : l / repetition;
    };
    // Each distinct token once, whether it is in the prompt, the answer, or both.
    for (const int32_t t : h.prompt) penalize(t);
    for (const auto& [t, count] : h.answer) {
      if (!std::binary_search(h.prompt.begin(), h.prompt.end(), t)) penalize(t);
    }
  }
  for (const auto& [t, count] : h.answer) {
    if (t < 0 || t >= vocab) continue;
    penalized_[static_cast<size_t>(t)] -=
        options_.frequency_penalty * static_cast<float>(count) + options_.presence_penalty;
  }
  for (const auto& [t, bias] : options_.logit_bias) {
    if (t < vocab) penalized_[static_cast<size_t>(t)] += bias;
  }
  return penalized_;
}

int32_t Sampler::Sample(int sequence, std::span<const float> logits) {
  SY_CHECK(sequence >= 0 && sequence < num_sequences())
      << "sequence " << sequence << " outside [0, " << num_sequences() << ")";
  SY_CHECK(!logits.empty()) << "Sample on an empty row of logits";
  SY_CHECK_LE(logits.size(), static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  if (!penalized()) return Draw(sequence, logits);
  const int32_t token = Draw(sequence, Penalize(sequence, logits));
  ++histories_[static_cast<size_t>(sequence)].answer[token];
  return token;
}

int32_t Sampler::Draw(int sequence, std::span<const float> logits) {
  if (options_.temperature == 0.0f) return GreedyArgmax(logits);

  // Tokens with a chance: -inf has probability 0, and NaN is treated as -inf.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > kNegInf) candidates_.push_back({logits[i], static_cast<int32_t>(i)});
  }
  SY_CHECK(!candidates_.empty()) << "every one of " << logits.size()
                                 << " logits is -inf or NaN: the model produced no distribution";

  // Most likely first; lower token id first among equal logits, so the order (and therefore the
  // draw) is fully determined. Dividing by a positive temperature keeps the order.
  auto more_likely = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
  };
  size_t count = candidates_.size();
  bool top_k = options_.top_k > 0 && static_cast<size_t>(options_.top_k) < count;
  bool top_p = options_.top_p < 1.0f;
  if (top_k) {
    count = static_cast<size_t>(options_.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(count - 1),
                     candidates_.end(), more_likely);
    candidates_.resize(count);
    std::sort(candidates_.begin(), candidates_.end(), more_likely);
  } else if (top_p) {
    std::sort(candidates_.begin(), candidates_.end(), more_likely);
  }

  // Unnormalised softmax of logits / temperature, relative to the largest logit.
  float max_logit = kNegInf;
  for (const Candidate& c : candidates_) max_logit = std::max(max_logit, c.logit);
  weights_.resize(count);
  const double temperature = options_.temperature;
  for (size_t i = 0; i < count; ++i) {
    float logit = candidates_[i].logit;
    if (std::isinf(max_logit)) {
      weights_[i] = logit == max_logit ? 1.0 : 0.0;  // +inf logits share all the mass
    } else {
      weights_[i] = std::exp((static_cast<double>(logit) - max_logit) / temperature);
    }
  }

  if (top_p) {
    // Keep the most likely tokens until their mass reaches top_p: a token stays when the mass
    // strictly above it is below top_p (HF's "cumulative mass from below <= 1 - top_p" rule).
    double total = 0.0;
    for (size_t i = 0; i < count; ++i) total += weights_[i];
    double threshold = static_cast<double>(options_.top_p) * total;
    double cumulative = 0.0;
    size_t keep = 0;
    while (keep < count) {
      cumulative += weights_[keep++];
      if (cumulative >= threshold) break;
    }
    count = keep;
  }
  if (options_.min_p > 0.0f) {
    // The weights are the kept tokens' probabilities up to one factor, which the ratio cancels.
    double most = 0.0;
    for (size_t i = 0; i < count; ++i) most = std::max(most, weights_[i]);
    const double floor = static_cast<double>(options_.min_p) * most;
    for (size_t i = 0; i < count; ++i) {
      if (weights_[i] < floor) weights_[i] = 0.0;
    }
  }

  double total = 0.0;
  for (size_t i = 0; i < count; ++i) total += weights_[i];
  std::mt19937_64& rng = generators_[static_cast<size_t>(sequence)];
  double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  double target = u * total;
  double cumulative = 0.0;
  size_t last_positive = 0;
  for (size_t i = 0; i < count; ++i) {
    if (weights_[i] <= 0.0) continue;
    cumulative += weights_[i];
    last_positive = i;
    if (target < cumulative) return candidates_[i].token;
  }
  // Only reached when rounding leaves target at the very top of the last interval.
  return candidates_[last_positive].token;
}

void Sampler::SampleBatch(std::span<const float> logits, int64_t vocab, std::span<int32_t> tokens) {
  SY_CHECK_GT(vocab, 0);
  SY_CHECK_EQ(logits.size(), tokens.size() * static_cast<size_t>(vocab))
      << "logits must be [rows, vocab] with one row per output token";
  SY_CHECK_LE(tokens.size(), static_cast<size_t>(num_sequences()));
  for (size_t r = 0; r < tokens.size(); ++r) {
    tokens[r] = Sample(static_cast<int>(r),
                       logits.subspan(r * static_cast<size_t>(vocab), static_cast<size_t>(vocab)));
  }
}

StopCondition::StopCondition(std::vector<int32_t> stop_tokens, int64_t max_new_tokens)
    : stop_tokens_(std::move(stop_tokens)), max_new_tokens_(max_new_tokens) {
  std::sort(stop_tokens_.begin(), stop_tokens_.end());
  stop_tokens_.erase(std::unique(stop_tokens_.begin(), stop_tokens_.end()), stop_tokens_.end());
}

Result<StopCondition> StopCondition::Create(const SamplerOptions& options) {
  SY_RETURN_IF_ERROR(ValidateSamplerOptions(options));
  return StopCondition(options.stop_tokens, options.max_new_tokens);
}

StopReason StopCondition::Append(int32_t token) {
  SY_CHECK(!stopped()) << "StopCondition::Append after the sequence stopped; call Reset first";
  ++generated_;
  if (std::binary_search(stop_tokens_.begin(), stop_tokens_.end(), token)) {
    reason_ = StopReason::kStopToken;
  } else if (generated_ >= max_new_tokens_) {
    reason_ = StopReason::kMaxTokens;
  }
  return reason_;
}

void StopCondition::Reset() {
  generated_ = 0;
  reason_ = StopReason::kNone;
}

}  // namespace sy
