#include "runtime/data/task_accuracy.h"

#include <cstdio>

#include "runtime/core/check.h"

namespace sy {

TaskAccuracy::TaskAccuracy(int num_tasks) : stats_(static_cast<size_t>(num_tasks)) {
  SY_CHECK_GE(num_tasks, 1);
}

void TaskAccuracy::Add(const Batch& batch, const Tensor& predictions) {
  SY_CHECK(predictions.device().is_host() && predictions.is_contiguous());
  SY_CHECK(predictions.shape() == batch.targets.shape())
      << "predictions " << predictions.shape().ToString() << " vs targets "
      << batch.targets.shape().ToString();
  const size_t n = static_cast<size_t>(batch.targets.numel());
  Add(std::span<const int32_t>(batch.targets.data<int32_t>(), n),
      std::span<const int32_t>(predictions.data<int32_t>(), n),
      std::span<const int32_t>(batch.task_ids.data<int32_t>(),
                               static_cast<size_t>(batch.task_ids.numel())),
      batch.seq_len());
}

void TaskAccuracy::Add(std::span<const int32_t> targets, std::span<const int32_t> predictions,
                       std::span<const int32_t> task_ids, int64_t seq_len) {
  SY_CHECK_EQ(targets.size(), predictions.size());
  SY_CHECK_EQ(targets.size(), task_ids.size() * static_cast<size_t>(seq_len));
  for (size_t row = 0; row < task_ids.size(); ++row) {
    const int32_t task = task_ids[row];
    SY_CHECK(task >= 0 && task < num_tasks()) << "task id " << task;
    TaskAccuracyStats& s = stats_[static_cast<size_t>(task)];
    int64_t scored = 0;
    int64_t right = 0;
    for (int64_t t = 0; t < seq_len; ++t) {
      const size_t i = row * static_cast<size_t>(seq_len) + static_cast<size_t>(t);
      if (targets[i] == kIgnoreTarget) continue;
      ++scored;
      right += predictions[i] == targets[i] ? 1 : 0;
    }
    if (scored == 0) continue;
    ++s.examples;
    s.exact_matches += right == scored ? 1 : 0;
    s.tokens += scored;
    s.correct_tokens += right;
  }
}

TaskAccuracyStats TaskAccuracy::total() const {
  TaskAccuracyStats all;
  for (const TaskAccuracyStats& s : stats_) {
    all.examples += s.examples;
    all.exact_matches += s.exact_matches;
    all.tokens += s.tokens;
    all.correct_tokens += s.correct_tokens;
  }
  return all;
}

void TaskAccuracy::Reset() {
  for (TaskAccuracyStats& s : stats_) s = TaskAccuracyStats{};
}

std::string TaskAccuracy::ToString(const Dataset& dataset) const {
  SY_CHECK_EQ(dataset.num_tasks(), num_tasks());
  std::string text;
  char line[160];
  auto append = [&](std::string_view name, const TaskAccuracyStats& s) {
    std::snprintf(line, sizeof(line), "%.*s exact %.3f token %.3f (n=%lld)",
                  static_cast<int>(name.size()), name.data(), s.exact_match(), s.token_accuracy(),
                  static_cast<long long>(s.examples));
    if (!text.empty()) text += "; ";
    text += line;
  };
  for (int t = 0; t < num_tasks(); ++t) append(dataset.task_name(t), stats_[t]);
  if (num_tasks() > 1) append("all", total());
  return text;
}

}  // namespace sy
