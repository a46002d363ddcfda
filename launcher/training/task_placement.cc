#include "launcher/training/task_placement.h"

#include <algorithm>
#include <map>

#include "runtime/core/check.h"

namespace sy::launcher {
namespace {}  // namespace

std::pair<int64_t, int64_t> PieceRows(int64_t n, size_t j, size_t k) {
  const int64_t kk = static_cast<int64_t>(k), jj = static_cast<int64_t>(j);
  const int64_t base = n / kk, extra = n % kk;
  const int64_t begin = jj * base + std::min(jj, extra);
  return {begin, begin + base + (jj < extra ? 1 : 0)};
}

std::vector<TaskSlice> TaskPlacement::SlicesOf(int rank, const std::vector<int64_t>& rows) const {
  SY_CHECK_EQ(rows.size(), ranks_of_task.size());
  std::vector<TaskSlice> out;
  for (size_t t = 0; t < ranks_of_task.size(); ++t) {
    const std::vector<int>& ranks = ranks_of_task[t];
    for (size_t j = 0; j < ranks.size(); ++j) {
      if (ranks[j] != rank) continue;
      const auto [begin, end] = PieceRows(rows[t], j, ranks.size());
      if (end > begin) out.push_back({static_cast<int>(t), begin, end});
    }
  }
  return out;
}

std::vector<int64_t> TaskPlacement::RowsPerRank(const std::vector<int64_t>& rows) const {
  std::vector<int64_t> out(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    for (const TaskSlice& s : SlicesOf(r, rows)) out[static_cast<size_t>(r)] += s.rows();
  }
  return out;
}

Status TaskPlacement::Check(const std::vector<int64_t>& rows) const {
  for (size_t t = 0; t < rows.size(); ++t) {
    if (rows[t] > 0 && ranks_of_task[t].empty()) {
      return FailedPreconditionError("placement: task " + std::to_string(t) + " has " +
                                     std::to_string(rows[t]) + " rows but no rank");
    }
  }
  const std::vector<int64_t> per_rank = RowsPerRank(rows);
  for (int r = 0; r < world; ++r) {
    if (per_rank[static_cast<size_t>(r)] == 0) {
      return FailedPreconditionError(
          "placement: rank " + std::to_string(r) +
          " has no rows in this step (every rank needs a batch for the expert layers' "
          "collectives); raise the tasks' batch sizes (data.tasks.<task>.batch_size) to at least "
          "the world of " +
          std::to_string(world) + " rows in all, or run on fewer ranks");
    }
  }
  return Status::Ok();
}

std::string TaskPlacement::Describe(const std::vector<int64_t>& rows,
                                    const std::vector<std::string_view>& task_names) const {
  // Tasks grouped by the exact set of ranks they are on, so merged tasks read "sort+markov".
  std::map<std::vector<int>, std::vector<size_t>> groups;
  std::vector<std::vector<int>> order;
  for (size_t t = 0; t < ranks_of_task.size(); ++t) {
    if (ranks_of_task[t].empty()) continue;
    auto [it, fresh] = groups.emplace(ranks_of_task[t], std::vector<size_t>{});
    if (fresh) order.push_back(ranks_of_task[t]);
    it->second.push_back(t);
  }
  std::string out;
  for (const std::vector<int>& ranks : order) {
    const std::vector<size_t>& tasks = groups[ranks];
    if (!out.empty()) out += "; ";
    for (size_t i = 0; i < tasks.size(); ++i) {
      out += (i ? "+" : "") + std::string(task_names[tasks[i]]);
    }
    out += ranks.size() == 1 ? ": rank " : ": ranks ";
    for (size_t j = 0; j < ranks.size(); ++j) out += (j ? "," : "") + std::to_string(ranks[j]);
    out += " (";
    for (size_t i = 0; i < tasks.size(); ++i) {
      const size_t t = tasks[i];
      if (i) out += "+";
      for (size_t j = 0; j < ranks.size(); ++j) {
        const auto [begin, end] = PieceRows(rows[t], j, ranks.size());
        out += (j ? "/" : "") + std::to_string(end - begin);
      }
    }
    out += " rows)";
  }
  return out;
}

std::vector<int64_t> TaskPlacement::Encode() const {
  std::vector<int64_t> flat = {world, static_cast<int64_t>(ranks_of_task.size())};
  for (const std::vector<int>& ranks : ranks_of_task) {
    flat.push_back(static_cast<int64_t>(ranks.size()));
    flat.insert(flat.end(), ranks.begin(), ranks.end());
  }
  return flat;
}

TaskPlacement TaskPlacement::Decode(const std::vector<int64_t>& flat) {
  SY_CHECK_GE(flat.size(), 2u) << "placement encoding";
  TaskPlacement p;
  p.world = static_cast<int>(flat[0]);
  size_t at = 2;
  for (int64_t t = 0; t < flat[1]; ++t) {
    SY_CHECK_LT(at, flat.size()) << "placement encoding";
    const size_t n = static_cast<size_t>(flat[at++]);
    SY_CHECK_LE(at + n, flat.size()) << "placement encoding";
    p.ranks_of_task.emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(at),
                                 flat.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return p;
}

TaskPlacement UniformPlacement(const std::vector<int64_t>& rows, int world) {
  TaskPlacement p;
  p.world = world;
  // Each task's pieces start where the previous task's rows ended (modulo the world), so the
  // ranks share the step's rows as evenly as slicing the tasks' batches laid end to end.
  int64_t offset = 0;
  for (int64_t n : rows) {
    std::vector<int> ranks;
    if (n > 0) {
      for (int r = 0; r < world; ++r) ranks.push_back(static_cast<int>((offset + r) % world));
    }
    offset += n;
    p.ranks_of_task.push_back(std::move(ranks));
  }
  return p;
}

Result<TaskPlacement> PerTaskPlacement(const std::vector<int64_t>& rows, int world) {
  int tasks = 0;
  for (int64_t n : rows) tasks += n > 0 ? 1 : 0;
  if (world == 1) return UniformPlacement(rows, 1);
  if (tasks == 0 || world % tasks != 0) {
    return InvalidArgumentError("config: 'train.placement' per_task puts each of the " +
                                std::to_string(tasks) +
                                " tasks with rows on its own group of ranks, but they do not "
                                "divide the world of " +
                                std::to_string(world) + " ranks; run mpirun -np a multiple of " +
                                std::to_string(tasks) + ", or use train.placement=elastic");
  }
  const int group = world / tasks;
  TaskPlacement p;
  p.world = world;
  int next = 0;
  for (int64_t n : rows) {
    std::vector<int> ranks;
    if (n > 0) {
      for (int r = 0; r < group; ++r) ranks.push_back(next * group + r);
      ++next;
    }
    p.ranks_of_task.push_back(std::move(ranks));
  }
  return p;
}

}  // namespace sy::launcher
