#include "runtime/data/markov_chain.h"

#include "runtime/core/check.h"

namespace sy {

MarkovChain::MarkovChain(int num_states, int branching, uint64_t seed)
    : num_states_(num_states), branching_(branching) {
  SY_CHECK(num_states >= 1 && branching >= 1 && branching <= num_states)
      << "MarkovChain(" << num_states << ", " << branching << ")";
  const size_t n = static_cast<size_t>(num_states) * branching;
  successors_.resize(n);
  probabilities_.resize(n);
  cumulative_.resize(n);
  SampleRng rng(MixSeed(seed, 0x6d61726b6f76ull));  // "markov"
  std::vector<int32_t> states(num_states);
  for (int s = 0; s < num_states; ++s) {
    // A partial Fisher-Yates shuffle picks `branching` distinct successors.
    for (int i = 0; i < num_states; ++i) states[i] = i;
    double total = 0;
    for (int b = 0; b < branching; ++b) {
      const int j = b + static_cast<int>(rng.Uniform(static_cast<uint64_t>(num_states - b)));
      std::swap(states[b], states[j]);
      successors_[s * branching + b] = states[b];
      const double weight = 1.0 - rng.UniformDouble();  // (0, 1]
      probabilities_[s * branching + b] = weight;
      total += weight;
    }
    double running = 0;
    for (int b = 0; b < branching; ++b) {
      probabilities_[s * branching + b] /= total;
      running += probabilities_[s * branching + b];
      cumulative_[s * branching + b] = running;
    }
    cumulative_[s * branching + branching - 1] = 1.0;
  }
}

std::span<const int32_t> MarkovChain::Successors(int state) const {
  SY_CHECK(state >= 0 && state < num_states_) << "state " << state;
  return {successors_.data() + static_cast<size_t>(state) * branching_,
          static_cast<size_t>(branching_)};
}

std::span<const double> MarkovChain::Probabilities(int state) const {
  SY_CHECK(state >= 0 && state < num_states_) << "state " << state;
  return {probabilities_.data() + static_cast<size_t>(state) * branching_,
          static_cast<size_t>(branching_)};
}

double MarkovChain::Probability(int from, int to) const {
  std::span<const int32_t> next = Successors(from);
  for (size_t b = 0; b < next.size(); ++b) {
    if (next[b] == to) return Probabilities(from)[b];
  }
  return 0.0;
}

int MarkovChain::Sample(int state, SampleRng& rng) const {
  SY_CHECK(state >= 0 && state < num_states_) << "state " << state;
  const double u = rng.UniformDouble();
  const double* cumulative = cumulative_.data() + static_cast<size_t>(state) * branching_;
  for (int b = 0; b < branching_; ++b) {
    if (u < cumulative[b]) return successors_[static_cast<size_t>(state) * branching_ + b];
  }
  return successors_[static_cast<size_t>(state) * branching_ + branching_ - 1];
}

}  // namespace sy
