// TaskPlacement: which ranks compute which rows of a step under per-task batches
// (runtime/data/task_batches.h; train.placement, docs/training.md "Placement").
//
// Each task's batch is cut into pieces, one per entry of ranks_of_task[t]: piece j of k takes
// PieceRows(n, j, k) of the task's n rows (n / k each, the first n % k one more), and
// ranks_of_task[t][j] computes it. A task
// over several ranks is data parallel inside the task; a rank holding pieces of several tasks has
// them merged into its one batch. The cut follows the rows of the step, so a placement stays
// valid when a task's rows change (grow_at_step). Which rank computes a row changes nothing in
// the step's mathematics (the loss is each task's mean, weighted), only its time.
//
//   uniform:  every task cut into W pieces over all ranks, each task starting where the one before
//             ended, as if the tasks' batches were laid end to end and sliced evenly
//   per_task: the T tasks with rows, in config order, each on W / T consecutive ranks
//   elastic:  the planner's (elastic_planner.h)
//
// Value type; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/data/task_batches.h"

namespace sy::launcher {

// Rows [begin, end) of piece j of k over n rows.
std::pair<int64_t, int64_t> PieceRows(int64_t n, size_t j, size_t k);

struct TaskPlacement {
  int world = 1;
  // Per task (kSyntheticTaskNames order), the rank of each of its pieces; empty for a task
  // without rows.
  std::vector<std::vector<int>> ranks_of_task;

  // Rank `rank`'s slices of a step whose tasks have `rows` rows, in task then piece order.
  std::vector<TaskSlice> SlicesOf(int rank, const std::vector<int64_t>& rows) const;
  // Rows each rank computes.
  std::vector<int64_t> RowsPerRank(const std::vector<int64_t>& rows) const;
  // FailedPrecondition naming the rank when a rank has no rows (every rank takes part in the
  // expert layers' collectives and needs a batch), or a task with rows has no piece.
  Status Check(const std::vector<int64_t>& rows) const;
  // "copy: ranks 0,1 (4+4 rows); reverse: rank 2 (4); sort+markov: rank 3 (2+2)" style, one
  // entry per task.
  std::string Describe(const std::vector<int64_t>& rows,
                       const std::vector<std::string_view>& task_names) const;
  // Flat encoding (for a broadcast) and back.
  std::vector<int64_t> Encode() const;
  static TaskPlacement Decode(const std::vector<int64_t>& flat);

  bool operator==(const TaskPlacement&) const = default;
};

// Every task's rows spread over all `world` ranks.
TaskPlacement UniformPlacement(const std::vector<int64_t>& rows, int world);
// One task per rank group, in config order; InvalidArgument naming train.placement when the
// tasks with rows do not divide the world.
Result<TaskPlacement> PerTaskPlacement(const std::vector<int64_t>& rows, int world);

}  // namespace sy::launcher
