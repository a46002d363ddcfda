#include "runtime/data/task_batches.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "runtime/core/check.h"

namespace sy {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "switchyard-task-positions";
constexpr int kVersion = 1;

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

bool HasTaskBatchSizes(const DataOptions& options) {
  if (options.source != DataSource::kSynthetic) return false;
  for (const SyntheticTaskMix* t : options.tasks.Tasks()) {
    if (t->batch_size > 0 || t->grow_at_step > 0) return true;
  }
  return false;
}

std::vector<int64_t> TaskRowsAt(const DataOptions& options, int64_t steps_taken) {
  const auto tasks = options.tasks.Tasks();
  std::vector<int64_t> rows(tasks.size(), 0);
  // The tasks without a batch_size share data.batch_size by weight: floors first, then the
  // largest remainders (earliest task first on ties) get one more row each.
  double shared_weight = 0;
  for (const SyntheticTaskMix* t : tasks) shared_weight += t->batch_size > 0 ? 0 : t->weight;
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const SyntheticTaskMix& t = *tasks[i];
    if (t.batch_size > 0 || t.weight <= 0 || shared_weight <= 0) continue;
    const double exact = static_cast<double>(options.batch_size) * t.weight / shared_weight;
    rows[i] = static_cast<int64_t>(exact);
    given += rows[i];
    remainders.emplace_back(-(exact - static_cast<double>(rows[i])), i);
  }
  std::stable_sort(remainders.begin(), remainders.end());
  for (size_t k = 0; k < remainders.size() && given < options.batch_size; ++k, ++given) {
    ++rows[remainders[k].second];
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    const SyntheticTaskMix& t = *tasks[i];
    if (t.batch_size > 0) rows[i] = t.batch_size;
    // Steps are counted from 1: step s is the one taken after s - 1 steps.
    if (t.grow_at_step > 0 && steps_taken + 1 >= t.grow_at_step) rows[i] = t.grow_batch_size;
  }
  return rows;
}

std::vector<double> TaskLossWeights(const DataOptions& options, const std::vector<int64_t>& rows) {
  const auto tasks = options.tasks.Tasks();
  SY_CHECK_EQ(rows.size(), tasks.size());
  double total = 0;
  for (size_t i = 0; i < tasks.size(); ++i) total += rows[i] > 0 ? tasks[i]->weight : 0.0;
  std::vector<double> weights(tasks.size(), 0.0);
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (rows[i] > 0 && total > 0) weights[i] = tasks[i]->weight / total;
  }
  return weights;
}

Result<TaskStreams> TaskStreams::Create(const DataOptions& options, Dataset* dataset) {
  const auto* synthetic = dynamic_cast<const SyntheticDataset*>(dataset);
  if (options.source != DataSource::kSynthetic || synthetic == nullptr) {
    return InvalidArgumentError(
        "config: per-task batches (data.tasks.<task>.batch_size, or train.placement per_task / "
        "elastic) need the synthetic tasks, but 'data.source' is not \"synthetic\"; set "
        "data.source=synthetic or train.placement=uniform without task batch sizes");
  }
  TaskStreams streams(options, synthetic);
  streams.rows_ = TaskRowsAt(options, 0);
  streams.cursors_.assign(streams.rows_.size(), 0);
  int64_t total = 0;
  for (int64_t r : streams.rows_) total += r;
  if (total < 1) {
    return InvalidArgumentError(
        "config: 'data.tasks' gives no task any rows per step; give a task a positive weight "
        "and a batch_size, or raise data.batch_size");
  }
  return streams;
}

Status TaskStreams::Fill(const std::vector<TaskSlice>& slices, Batch* batch) const {
  int64_t rows = 0;
  for (const TaskSlice& s : slices) {
    SY_CHECK(s.task >= 0 && s.task < static_cast<int>(rows_.size()) && s.begin >= 0 &&
             s.begin <= s.end && s.end <= rows_[static_cast<size_t>(s.task)])
        << "task slice " << s.task << " [" << s.begin << ", " << s.end << ")";
    rows += s.rows();
  }
  const int64_t seq_len = dataset_->seq_len();
  SY_RETURN_IF_ERROR(batch->Reshape(rows, seq_len));
  int32_t* tokens = batch->tokens.data<int32_t>();
  int32_t* targets = batch->targets.data<int32_t>();
  int32_t* task_ids = batch->task_ids.data<int32_t>();
  int64_t r = 0;
  for (const TaskSlice& s : slices) {
    for (int64_t i = s.begin; i < s.end; ++i, ++r) {
      std::span<int32_t> row_tokens(tokens + r * seq_len, static_cast<size_t>(seq_len));
      std::span<int32_t> row_targets(targets + r * seq_len, static_cast<size_t>(seq_len));
      SY_ASSIGN_OR_RETURN(
          task_ids[r], dataset_->GetTaskExample(s.task, cursors_[static_cast<size_t>(s.task)] + i,
                                                row_tokens, row_targets));
    }
  }
  return Status::Ok();
}

void TaskStreams::Advance() {
  for (size_t t = 0; t < rows_.size(); ++t) cursors_[t] += rows_[t];
  ++steps_taken_;
  rows_ = TaskRowsAt(options_, steps_taken_);
}

std::string TaskStreams::SavePosition() const {
  json cursors = json::object();
  for (size_t t = 0; t < cursors_.size(); ++t) {
    cursors[std::string(dataset_->task_name(static_cast<int>(t)))] = cursors_[t];
  }
  return Dump({{"format", kFormat},
               {"version", kVersion},
               {"seed", options_.seed},
               {"steps", steps_taken_},
               {"cursors", cursors},
               {"dataset", dataset_->Fingerprint()}});
}

Status TaskStreams::RestorePosition(std::string_view saved) {
  const json position = json::parse(saved.begin(), saved.end(), nullptr, false);
  const auto bad = [](const std::string& why) {
    return InvalidArgumentError("task data position: " + why);
  };
  if (position.is_discarded() || !position.is_object()) {
    return bad("not valid JSON; the checkpoint's data position is corrupt");
  }
  if (position.value("format", json()) != kFormat) {
    return bad("not a per-task position (format " + Dump(position.value("format", json())) +
               "): the checkpoint was written by a run with one mixed batch per step; resume "
               "with the data.tasks batch sizes and train.placement it was trained with");
  }
  if (position.value("version", json()) != kVersion) {
    return bad("version " + Dump(position.value("version", json())) + " is not supported (this " +
               "build reads version " + std::to_string(kVersion) + ")");
  }
  if (!position.contains("seed") || !position["seed"].is_number_unsigned() ||
      position["seed"].get<uint64_t>() != options_.seed) {
    return bad("saved with data seed " + Dump(position.value("seed", json())) +
               ", but this run has seed " + std::to_string(options_.seed) +
               "; resume with the same data.seed");
  }
  if (position.value("dataset", json()) != dataset_->Fingerprint()) {
    return bad("saved for a different dataset (" + Dump(position.value("dataset", json())) +
               "); resume with the data settings of the saved run");
  }
  const json steps = position.value("steps", json());
  const json cursors = position.value("cursors", json());
  if (!steps.is_number_unsigned() || !cursors.is_object()) {
    return bad("\"steps\" must be a non-negative integer and \"cursors\" an object");
  }
  std::vector<int64_t> restored(cursors_.size(), 0);
  for (size_t t = 0; t < restored.size(); ++t) {
    const std::string name(dataset_->task_name(static_cast<int>(t)));
    const json c = cursors.value(name, json());
    if (!c.is_number_unsigned()) {
      return bad("cursor of task '" + name + "' must be a non-negative integer, got " + Dump(c));
    }
    restored[t] = c.get<int64_t>();
  }
  steps_taken_ = steps.get<int64_t>();
  cursors_ = std::move(restored);
  rows_ = TaskRowsAt(options_, steps_taken_);
  return Status::Ok();
}

}  // namespace sy
