// TaskAccuracy: per-task exact-match and token accuracy of a model's answers, for the synthetic
// tasks (and, with one task, for any dataset).
//
// Feed it batches and the model's predicted next token at every position (the argmax of the
// logits, i32 [B, T]); only the scored positions (target != -1), which for the synthetic tasks are
// the answer and its EOS, are compared. An example is an exact match when every scored position is
// right; examples with no scored position are not counted.
//
// Ownership: a value type. Thread-safety: none.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/data/batcher.h"
#include "runtime/data/dataset.h"

namespace sy {

struct TaskAccuracyStats {
  int64_t examples = 0;        // examples with at least one scored position
  int64_t exact_matches = 0;   // of those, with every scored position right
  int64_t tokens = 0;          // scored positions
  int64_t correct_tokens = 0;  // of those, predicted right

  double exact_match() const { return examples > 0 ? double(exact_matches) / examples : 0.0; }
  double token_accuracy() const { return tokens > 0 ? double(correct_tokens) / tokens : 0.0; }
};

class TaskAccuracy {
 public:
  explicit TaskAccuracy(int num_tasks);

  // predictions: i32 [B, T] host tensor, same shape as batch.targets.
  void Add(const Batch& batch, const Tensor& predictions);
  // The same over raw rows: targets and predictions [B * seq_len], task_ids [B].
  void Add(std::span<const int32_t> targets, std::span<const int32_t> predictions,
           std::span<const int32_t> task_ids, int64_t seq_len);

  int num_tasks() const { return static_cast<int>(stats_.size()); }
  const TaskAccuracyStats& task(int t) const { return stats_.at(t); }
  TaskAccuracyStats total() const;
  void Reset();

  // "copy exact 0.950 token 0.990 (n=40); ...; all exact ... " with the dataset's task names.
  std::string ToString(const Dataset& dataset) const;

 private:
  std::vector<TaskAccuracyStats> stats_;
};

}  // namespace sy
