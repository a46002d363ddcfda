// SyntheticDataset: generated multi-task examples (copy, reverse, sort, modular addition and a
// Markov language) for training and testing MoE models whose experts can specialise by task.
//
// The vocabulary, the example layout and the tasks are documented in
// runtime/data/synthetic_vocab.h. Example (split, index) is generated from
// SampleRng(MixSeed(seed, split, index)):
//   train: the task is drawn by the mixture weights, then an input of that task;
//   eval:  the task is index % 5 (every task equally, whatever the weights, so per-task accuracy
//          is comparable across runs that rebalance the mixture), then an input.
// An input belongs to the eval split when a seeded hash of (task, input) falls below
// eval_fraction; each split redraws inputs of the other, so the splits never share an input.
// Both splits are unbounded.
//
// Ownership: owns its Markov chain. Thread-safety: see runtime/data/dataset.h; SetTaskWeights
// must not race with Get.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/config/config_schema.h"
#include "runtime/data/dataset.h"
#include "runtime/data/markov_chain.h"
#include "runtime/data/sample_rng.h"
#include "runtime/data/synthetic_vocab.h"

namespace sy {

// The "data.synthetic" config block.
struct SyntheticOptions {
  int num_symbols = 16;       // Default: 16 symbols (vocabulary 32). At least 10 (the digits)
  int min_len = 2;            // Default: 2. Shortest copy/reverse/sort input
  int max_len = 8;            // Default: 8. Longest copy/reverse/sort input
  int modulus = 97;           // Default: 97. The p of modadd (a + b mod p), at least 2
  int markov_prefix_len = 8;  // Default: 8. Markov input length (symbols)
  int markov_answer_len = 8;  // Default: 8. Markov answer length (symbols, then EOS)
  int markov_branching = 3;   // Default: 3 successors per state, at most num_symbols
};

// One task of "data.tasks.<task>": its mixture weight and, for per-task batches
// (runtime/data/task_batches.h), its rows per step.
struct SyntheticTaskMix {
  double weight = 1.0;  // Default: 1. Relative frequency in the train split; 0 disables the task
  // Default: 0 = its share of data.batch_size by weight. Rows of this task in every step; any
  // task with one makes every step draw each task's batch apart (task_batches.h).
  int64_t batch_size = 0;
  // Default: 0 = never. From this step on (steps taken, 1-based) the task's rows per step become
  // grow_batch_size: a workload that drifts mid-run (the elastic trainer rebalances for it).
  int64_t grow_at_step = 0;
  int64_t grow_batch_size = 0;  // Default: 0. Rows per step from grow_at_step on
};

// "data.tasks": one entry per task, named as kSyntheticTaskNames.
struct SyntheticTaskWeights {
  SyntheticTaskMix copy;
  SyntheticTaskMix reverse;
  SyntheticTaskMix sort;
  SyntheticTaskMix modadd;
  SyntheticTaskMix markov;

  std::array<double, kNumSyntheticTasks> ToArray() const {
    return {copy.weight, reverse.weight, sort.weight, modadd.weight, markov.weight};
  }
  std::array<const SyntheticTaskMix*, kNumSyntheticTasks> Tasks() const {
    return {&copy, &reverse, &sort, &modadd, &markov};
  }
};

// The first problem with these settings, keyed relative to the "data" block
// ({"synthetic.max_len", "must be at most 30 so ..."}), or nullopt.
std::optional<ConfigIssue> CheckSyntheticOptions(const SyntheticOptions& options, int64_t seq_len,
                                                 double eval_fraction,
                                                 std::span<const double> task_weights);

class SyntheticDataset : public Dataset {
 public:
  // InvalidArgument naming the data.* key when CheckSyntheticOptions finds a problem.
  static Result<std::unique_ptr<SyntheticDataset>> Create(const SyntheticOptions& options,
                                                          int64_t seq_len, uint64_t seed,
                                                          double eval_fraction,
                                                          std::span<const double> task_weights);

  std::string name() const override { return "synthetic"; }
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return kFirstSymbol + options_.num_symbols; }
  int num_tasks() const override { return kNumSyntheticTasks; }
  std::string_view task_name(int task) const override;
  int64_t size(Split split) const override;
  Result<int32_t> Get(Split split, int64_t index, std::span<int32_t> tokens,
                      std::span<int32_t> targets) const override;
  nlohmann::json Fingerprint() const override;
  nlohmann::json State() const override;
  Status RestoreState(const nlohmann::json& state) override;

  // Train example `index` of task `task`'s own stream (per-task batches, task_batches.h): a
  // stream apart from Get's mixed one, independent of the weights. Returns `task`.
  Result<int32_t> GetTaskExample(int task, int64_t index, std::span<int32_t> tokens,
                                 std::span<int32_t> targets) const;

  // Replaces the train mixture (kNumSyntheticTasks non-negative weights, not all zero). Changes
  // which task every later train example draws; eval examples do not depend on it.
  Status SetTaskWeights(std::span<const double> weights);
  const std::array<double, kNumSyntheticTasks>& task_weights() const { return weights_; }

  const MarkovChain& markov_chain() const { return chain_; }
  const SyntheticOptions& options() const { return options_; }
  // Digits per modadd operand and answer.
  int modadd_width() const { return modadd_width_; }
  // Whether (task, input) is held out for eval; `input` is the tokens between the tag and SEP.
  bool IsEvalInput(SyntheticTask task, std::span<const int32_t> input) const;

 private:
  SyntheticDataset(const SyntheticOptions& options, int64_t seq_len, uint64_t seed,
                   double eval_fraction);

  // An example of `task` for `split` from `rng`: an input of that split, packed with its answer.
  Result<int32_t> Generate(Split split, int task, SampleRng& rng, std::span<int32_t> tokens,
                           std::span<int32_t> targets) const;
  void DrawInput(SyntheticTask task, SampleRng& rng, std::vector<int32_t>* input) const;
  void ComputeAnswer(SyntheticTask task, std::span<const int32_t> input, SampleRng& rng,
                     std::vector<int32_t>* answer) const;

  SyntheticOptions options_;
  int64_t seq_len_;
  uint64_t seed_;
  double eval_fraction_;
  int modadd_width_;
  MarkovChain chain_;
  std::array<double, kNumSyntheticTasks> weights_{};
  std::array<double, kNumSyntheticTasks> cumulative_{};  // normalised, last exactly 1
};

// Writes prompt then answer as one sequence S padded with kPad to seq_len + 1 tokens:
// tokens = S[0, seq_len), targets[t] = S[t + 1] where S[t + 1] belongs to the answer, else -1.
// The prompt and answer must fit (checked).
void PackExample(std::span<const int32_t> prompt, std::span<const int32_t> answer,
                 std::span<int32_t> tokens, std::span<int32_t> targets);

}  // namespace sy
