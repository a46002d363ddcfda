#include "launcher/training/resume_command.h"

#include <algorithm>
#include <numeric>

#include "runtime/data/task_batches.h"

namespace sy::launcher {
namespace {

// `text` as one word of a POSIX shell.
std::string Quote(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-.,/=:+@%") == std::string::npos) {
    return text;
  }
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Status CheckWorldSize(const TrainConfig& config, int world) {
  const ParallelOptions& par = config.parallel;
  if (world % par.ep_size != 0) {
    return InvalidArgumentError("parallel.ep_size " + std::to_string(par.ep_size) +
                                " does not divide " + std::to_string(world));
  }
  if (world == 1 && (par.ep_size > 1 || par.zero_stage == 3)) {
    return InvalidArgumentError("one process needs parallel.ep_size 1 and zero_stage 0");
  }
  if (par.ranks_per_node > 0 && world % par.ranks_per_node != 0) {
    return InvalidArgumentError("parallel.ranks_per_node does not divide " + std::to_string(world));
  }
  if (par.embedding_partition && config.model.hidden_size % world != 0) {
    return InvalidArgumentError("model.hidden_size is not a multiple of " + std::to_string(world));
  }
  const bool per_task =
      HasTaskBatchSizes(config.data) || config.train.placement != Placement::kUniform;
  if (!per_task) {
    if (config.data.batch_size % world != 0) {
      return InvalidArgumentError("data.batch_size does not divide over " + std::to_string(world));
    }
    return Status::Ok();
  }
  const std::vector<int64_t> rows = TaskRowsAt(config.data, 0);
  int tasks = 0;
  for (int64_t n : rows) tasks += n > 0 ? 1 : 0;
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  if (config.train.placement == Placement::kPerTask && world > 1 && world % tasks != 0) {
    return InvalidArgumentError("the tasks do not divide " + std::to_string(world));
  }
  if (total < world) return InvalidArgumentError("fewer rows than ranks");
  return Status::Ok();
}

std::string ResumeCommand(const TrainConfig& config, const std::string& binary,
                          const std::string& config_path, const std::vector<std::string>& overrides,
                          int world) {
  if (config.checkpoint.dir.empty()) {
    return "no checkpoint to resume from (checkpoint.dir is not set); set checkpoint.dir and "
           "checkpoint.every to make a lost rank resumable";
  }
  for (int m = world - 1; m >= 1; --m) {
    TrainConfig candidate = config;
    std::vector<std::string> extra;
    // The largest expert-parallel group that divides the new world and the experts.
    int ep = config.parallel.ep_size;
    while (ep > 1 && (m % ep != 0 || config.model.num_experts % ep != 0)) --ep;
    if (m == 1) ep = 1;
    if (ep != config.parallel.ep_size) {
      candidate.parallel.ep_size = ep;
      extra.push_back("parallel.ep_size=" + std::to_string(ep));
    }
    if (m == 1 && config.parallel.zero_stage == 3) {
      candidate.parallel.zero_stage = 0;
      extra.push_back("parallel.zero_stage=0");
    }
    if (config.parallel.ranks_per_node > 0 && m % config.parallel.ranks_per_node != 0) {
      candidate.parallel.ranks_per_node = 0;
      candidate.parallel.hierarchical_a2a = false;
      extra.push_back("parallel.ranks_per_node=0");
      extra.push_back("parallel.hierarchical_a2a=false");
    }
    if (!CheckWorldSize(candidate, m).ok()) continue;
    std::string command =
        m > 1 ? "mpirun -np " + std::to_string(m) + " " + Quote(binary) : Quote(binary);
    command += " train --config " + Quote(config_path);
    for (const std::string& o : overrides) {
      if (o.rfind("checkpoint.resume", 0) == 0) continue;  // --resume below
      // A key the smaller world changes is given once, with its new value (below).
      const std::string key = o.substr(0, o.find('='));
      if (std::any_of(extra.begin(), extra.end(),
                      [&](const std::string& e) { return e.rfind(key + "=", 0) == 0; })) {
        continue;
      }
      command += " --set " + Quote(o);
    }
    for (const std::string& o : extra) command += " --set " + o;
    return command + " --resume";
  }
  return "no smaller world admits this config (data.batch_size, parallel.ep_size); resume on " +
         std::to_string(world) + " ranks with --resume";
}

}  // namespace sy::launcher
