// Dataset: a source of fixed-length training examples, addressed by (split, index).
//
// An example is one row of seq_len tokens and seq_len targets: targets[t] is the token the model
// should predict after reading tokens[0..t], or -1 where nothing is scored (the CrossEntropy
// ignore index of runtime/backend/backend.h). Each example carries a task id in
// [0, num_tasks()).
//
// Splits. Every dataset has a train split and a held-out eval split that never overlap: file
// datasets hold out the last windows of the file; the synthetic dataset assigns each possible input
// to one split by a hash of its content, so no eval input ever appears in training.
//
// Examples depend only on (split, index) and the dataset's construction (and, for the synthetic
// dataset, its task weights), which is what makes a saved data position resumable bit for bit.
// The Batcher (runtime/data/batcher.h) turns a Dataset into batches.
//
// Implementations: SyntheticDataset, TokenFileDataset, TextDataset; CreateDataset
// (runtime/data/data_options.h) picks one from the config.
//
// Ownership: a Dataset owns its data (a file mapping, a transition table).
// Thread-safety: Get and the accessors are const and may run concurrently; RestoreState and
// SyntheticDataset::SetTaskWeights must not race with them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

enum class Split : uint8_t { kTrain, kEval };
std::string_view SplitName(Split split);  // "train", "eval"

// The target of positions that are not scored.
inline constexpr int32_t kIgnoreTarget = -1;

class Dataset {
 public:
  // size() of a split that never runs out (generated data).
  static constexpr int64_t kUnbounded = -1;

  virtual ~Dataset() = default;

  // "synthetic", "tokens <path>", "text <path>".
  virtual std::string name() const = 0;
  virtual int64_t seq_len() const = 0;
  // Every token and target is in [0, vocab_size()) (targets may also be -1).
  virtual int64_t vocab_size() const = 0;
  virtual int num_tasks() const = 0;
  virtual std::string_view task_name(int task) const = 0;

  // The number of examples in `split`, or kUnbounded. A finite split may be empty (size 0).
  virtual int64_t size(Split split) const = 0;

  // Writes example `index` of `split` into `tokens` and `targets` (each seq_len() long) and
  // returns its task id. `index` must be in [0, size(split)) for a finite split. Errors only for
  // a split that cannot produce examples (it is empty).
  virtual Result<int32_t> Get(Split split, int64_t index, std::span<int32_t> tokens,
                              std::span<int32_t> targets) const = 0;

  // What examples depend on, as JSON (kind, seed, seq_len, file path and size, ...). A data
  // position saved with one fingerprint only resumes on a dataset with the same one.
  virtual nlohmann::json Fingerprint() const = 0;

  // Settings that may change during a run and that examples depend on (the synthetic task
  // weights), saved with the data position. Default: none (null), and restoring anything but
  // null is an error.
  virtual nlohmann::json State() const { return nullptr; }
  virtual Status RestoreState(const nlohmann::json& state);
};

}  // namespace sy
