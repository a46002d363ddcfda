// Trainer's per-task batches (trainer.h, runtime/data/task_batches.h): the placement of the tasks
// on the ranks (task_placement.h), each row's loss weight, and the elastic planner's live
// rebalancing (elastic_planner.h).
#include <cstdio>
#include <span>

#include "launcher/training/distributed_rank.h"
#include "launcher/training/rank_collectives.h"
#include "launcher/training/trainer.h"

namespace sy::launcher {
namespace {

std::string_view PlacementName(Placement p) {
  switch (p) {
    case Placement::kUniform:
      return "uniform";
    case Placement::kPerTask:
      return "per_task";
    case Placement::kElastic:
      return "elastic";
  }
  return "uniform";
}

std::string Percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100 * x);
  return buf;
}

}  // namespace

Status Trainer::InitTaskBatches() {
  SY_ASSIGN_OR_RETURN(TaskStreams streams, TaskStreams::Create(config_.data, dataset_.get()));
  task_streams_ = std::make_unique<TaskStreams>(std::move(streams));
  return PlaceTasks();
}

Status Trainer::PlaceTasks() {
  const std::vector<int64_t>& rows = task_streams_->rows();
  const int w = world_size();
  switch (config_.train.placement) {
    case Placement::kUniform:
      placement_ = UniformPlacement(rows, w);
      break;
    case Placement::kPerTask: {
      SY_ASSIGN_OR_RETURN(placement_, PerTaskPlacement(rows, w));
      break;
    }
    case Placement::kElastic: {
      const CostShape shape =
          CostShape::Of(config_.model, config_.data.seq_len, config_.parallel.ep_size);
      SY_ASSIGN_OR_RETURN(placement_, PlanElastic(cost_, shape, rows, w));
      break;
    }
  }
  return placement_.Check(rows);
}

std::string Trainer::PlacementSummary() const {
  if (!task_streams_) return "";
  std::vector<std::string_view> names;
  for (int t = 0; t < dataset_->num_tasks(); ++t) names.push_back(dataset_->task_name(t));
  return "placement " + std::string(PlacementName(config_.train.placement)) + " on " +
         std::to_string(world_size()) + (world_size() == 1 ? " rank: " : " ranks: ") +
         placement_.Describe(task_streams_->rows(), names);
}

Status Trainer::NextTaskBatch(std::vector<float>* row_weights, float* share) {
  const std::vector<int64_t>& rows = task_streams_->rows();
  const std::vector<TaskSlice> slices = placement_.SlicesOf(rank(), rows);
  SY_RETURN_IF_ERROR(task_streams_->Fill(slices, &batch_));
  // The scored targets of each task on this rank, then over the world, and this rank's rows.
  const size_t tasks = rows.size();
  std::vector<std::vector<int64_t>> counts(1, std::vector<int64_t>(tasks + 1, 0));
  const int64_t seq_len = batch_.seq_len();
  const int32_t* targets = batch_.targets.data<int32_t>();
  const int32_t* task_ids = batch_.task_ids.data<int32_t>();
  for (int64_t r = 0; r < batch_.batch_size(); ++r) {
    for (int64_t i = 0; i < seq_len; ++i) {
      counts[0][static_cast<size_t>(task_ids[r])] += targets[r * seq_len + i] >= 0 ? 1 : 0;
    }
  }
  counts[0][tasks] = batch_.batch_size();
  if (dist_) SY_RETURN_IF_ERROR(dist_->SumOverWorld(counts));
  int64_t total_rows = 0;
  for (int64_t n : rows) total_rows += n;
  SY_CHECK_EQ(counts[0][tasks], total_rows) << "every row of the step computed once";
  // This rank's share of the step's rows weighs its router losses as in a mixed batch; the
  // cross-entropy weights are divided by it, so that each task's mean, weighted, is exact.
  *share = static_cast<float>(static_cast<double>(batch_.batch_size()) /
                              static_cast<double>(total_rows));
  const std::vector<double> loss_weights = TaskLossWeights(config_.data, rows);
  row_weights->assign(static_cast<size_t>(batch_.batch_size()), 0.0f);
  for (int64_t r = 0; r < batch_.batch_size(); ++r) {
    const size_t t = static_cast<size_t>(task_ids[r]);
    const int64_t n = counts[0][t];
    (*row_weights)[static_cast<size_t>(r)] =
        n > 0 ? static_cast<float>(loss_weights[t] / static_cast<double>(n) / *share) : 0.0f;
  }
  return Status::Ok();
}

Status Trainer::EndTaskStep(StepReport* report) {
  report->task_rows = task_streams_->rows();
  window_.compute_seconds += report->seconds - report->communication_seconds;
  window_.wait_seconds += report->communication_seconds;
  window_.tokens += batch_.batch_size() * batch_.seq_len();
  ++window_steps_;
  task_streams_->Advance();
  const int64_t every = config_.elastic.rebalance_every;
  if (config_.train.placement == Placement::kElastic && every > 0 && step_ % every == 0 &&
      world_size() > 1) {
    SY_RETURN_IF_ERROR(Rebalance(report));
  }
  // The next step's rows (a task may have grown) must still give every rank a batch.
  return placement_.Check(task_streams_->rows());
}

Status Trainer::Rebalance(StepReport* report) {
  const double steps = static_cast<double>(window_steps_);
  std::vector<double> mine = {window_.compute_seconds / steps, window_.wait_seconds / steps,
                              static_cast<double>(window_.tokens) / steps};
  window_ = RankSample{};
  window_steps_ = 0;
  std::vector<double> all;
  std::vector<size_t> offsets;
  SY_RETURN_IF_ERROR(AllGatherVector(dist_->world(), mine, &all, &offsets));
  // Rank 0 decides and every rank takes its decision (the same numbers on every rank would give
  // the same one; broadcasting it makes that independent of floating-point evaluation order).
  std::vector<int64_t> decision;
  std::vector<double> numbers(3, 0.0);
  std::string cost_text;
  const std::vector<int64_t>& rows = task_streams_->rows();
  if (is_root()) {
    std::vector<RankSample> samples;
    for (size_t r = 0; r + 1 < offsets.size(); ++r) {
      const double* v = all.data() + offsets[r];
      samples.push_back({v[0], v[1], static_cast<int64_t>(v[2])});
    }
    const CostShape shape =
        CostShape::Of(config_.model, config_.data.seq_len, config_.parallel.ep_size);
    const CostModel cost = CalibrateCostModel(samples, shape);
    const double current = PredictStepSeconds(cost, shape, placement_, rows);
    Result<TaskPlacement> plan = PlanElastic(cost, shape, rows, world_size());
    TaskPlacement next = plan.ok() ? *plan : placement_;
    const double predicted = PredictStepSeconds(cost, shape, next, rows);
    const double gain = current > 0 ? 1 - predicted / current : 0;
    const bool adopt = !(next == placement_) && gain > config_.elastic.min_gain;
    decision = adopt ? next.Encode() : std::vector<int64_t>{};
    numbers = {current, predicted, gain};
    cost_text = cost.ToString();
  }
  SY_RETURN_IF_ERROR(BroadcastVector(dist_->world(), decision));
  SY_RETURN_IF_ERROR(BroadcastVector(dist_->world(), numbers));
  std::vector<std::string_view> names;
  for (int t = 0; t < dataset_->num_tasks(); ++t) names.push_back(dataset_->task_name(t));
  char head[200];
  std::snprintf(head, sizeof(head), "rebalance at step %lld: predicted step %.4g s -> %.4g s",
                static_cast<long long>(step_), numbers[0], numbers[1]);
  if (decision.empty()) {
    if (is_root()) {
      report->placement_change =
          std::string(head) + " (gain " + Percent(numbers[2]) + ", not above elastic.min_gain " +
          Percent(config_.elastic.min_gain) + "): placement kept; cost " + cost_text;
    }
    return Status::Ok();
  }
  TaskPlacement next = TaskPlacement::Decode(decision);
  SY_RETURN_IF_ERROR(next.Check(rows));
  if (is_root()) {
    auto list = [](const std::vector<int>& ranks) {
      std::string s;
      for (size_t j = 0; j < ranks.size(); ++j) s += (j ? "," : "") + std::to_string(ranks[j]);
      return s;
    };
    std::string moved;
    for (size_t t = 0; t < next.ranks_of_task.size(); ++t) {
      if (next.ranks_of_task[t] == placement_.ranks_of_task[t]) continue;
      moved += (moved.empty() ? "" : ", ") + std::string(names[t]) + " ranks " +
               list(placement_.ranks_of_task[t]) + " -> " + list(next.ranks_of_task[t]);
    }
    report->placement_change = std::string(head) + " (gain " + Percent(numbers[2]) +
                               " > elastic.min_gain " + Percent(config_.elastic.min_gain) +
                               "); moved " + moved +
                               " (every rank keeps every task's data position); now " +
                               next.Describe(rows, names) + "; cost " + cost_text;
  }
  placement_ = std::move(next);
  return Status::Ok();
}

}  // namespace sy::launcher
