// MarkovChain: a fixed random sparse transition table, the "language" of the synthetic markov
// task.
//
// Each of num_states states has `branching` distinct successors, chosen uniformly, with random
// probabilities (uniform weights in (0, 1], normalised). The table depends only on the seed, so
// the same config always describes the same language.
//
// Ownership: a value type. Thread-safety: immutable after construction; Sample is const and may be
// called from many threads, each with its own SampleRng.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/data/sample_rng.h"

namespace sy {

class MarkovChain {
 public:
  // 1 <= branching <= num_states.
  MarkovChain(int num_states, int branching, uint64_t seed);

  int num_states() const { return num_states_; }
  int branching() const { return branching_; }

  // The successors of `state` and their probabilities (same order, summing to 1).
  std::span<const int32_t> Successors(int state) const;
  std::span<const double> Probabilities(int state) const;
  // P(to | from); 0 when `to` is not a successor.
  double Probability(int from, int to) const;

  // Draws the next state after `state`.
  int Sample(int state, SampleRng& rng) const;

 private:
  int num_states_;
  int branching_;
  std::vector<int32_t> successors_;    // [num_states, branching]
  std::vector<double> probabilities_;  // [num_states, branching]
  std::vector<double> cumulative_;     // [num_states, branching], last of each row exactly 1
};

}  // namespace sy
