// Per-task batches: every train step draws each synthetic task's own batch, of that task's rows
// (data.tasks.<task>.batch_size, its workload), instead of one batch whose rows draw their task
// by weight. The loss of the step is then each task's mean cross-entropy, weighted by the tasks'
// normalised weights (TaskLossWeights), whichever rank computes which rows.
//
// Rows of a task. A task with a batch_size has that many rows per step; the tasks without one
// share data.batch_size by their weights (largest remainder, so the shares sum to it); a task of
// weight 0 has none. From grow_at_step on a task has grow_batch_size rows (a drifting workload).
//
// Streams. Task t's examples are SyntheticDataset::GetTaskExample(t, i) for i = 0, 1, ...; the
// step takes rows [cursor_t, cursor_t + rows_t) of it and every cursor advances by its rows, on
// every rank alike, so every rank knows every task's position and any rank's saved position
// resumes all of them, under any world size and any placement.
//
// Ownership: TaskStreams borrows the dataset, which must outlive it. Thread-safety: none; one
// thread drives it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/data/batcher.h"
#include "runtime/data/data_options.h"
#include "runtime/data/synthetic_dataset.h"

namespace sy {

// Whether `options` asks for per-task batches: a synthetic source with some task's batch_size or
// grow_at_step set.
bool HasTaskBatchSizes(const DataOptions& options);

// Rows of each task (kSyntheticTaskNames order) in the step after `steps_taken` steps.
std::vector<int64_t> TaskRowsAt(const DataOptions& options, int64_t steps_taken);

// Each task's loss weight: its weight over the sum of the weights of the tasks that have rows in
// `rows` (0 for the others).
std::vector<double> TaskLossWeights(const DataOptions& options, const std::vector<int64_t>& rows);

// Rows [begin, end) of one task's batch in a step.
struct TaskSlice {
  int task = 0;
  int64_t begin = 0;
  int64_t end = 0;

  int64_t rows() const { return end - begin; }
  bool operator==(const TaskSlice&) const = default;
};

class TaskStreams {
 public:
  // InvalidArgument naming data.source when the data is not synthetic.
  static Result<TaskStreams> Create(const DataOptions& options, Dataset* dataset);

  // Rows of each task in the current step (the step after steps_taken()).
  const std::vector<int64_t>& rows() const { return rows_; }
  int64_t steps_taken() const { return steps_taken_; }

  // Fills `batch` with `slices` of the current step's task batches, one after another (tensors
  // reallocated when their shapes differ; ResourceExhausted when they do not fit). A slice must
  // lie within its task's rows (checked).
  Status Fill(const std::vector<TaskSlice>& slices, Batch* batch) const;
  // Ends the current step: every cursor advances by its task's rows.
  void Advance();

  // {"format": "switchyard-task-positions", "version": 1, "steps": S, "cursors": {task: n}, ...}
  std::string SavePosition() const;
  // InvalidArgument naming what differs when `saved` is not a task position (a mixed-batch
  // position, say), or was saved for another data seed or dataset.
  Status RestorePosition(std::string_view saved);

 private:
  TaskStreams(const DataOptions& options, const SyntheticDataset* dataset)
      : options_(options), dataset_(dataset) {}

  DataOptions options_;
  const SyntheticDataset* dataset_;
  int64_t steps_taken_ = 0;
  std::vector<int64_t> rows_;     // this step's, per task
  std::vector<int64_t> cursors_;  // examples of each task consumed
};

}  // namespace sy
