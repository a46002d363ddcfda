#include "launcher/training/training_loop.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launcher/training/directory_lock.h"
#include "launcher/training/expert_state_store.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/unique_fd.h"
#include "storage/cache/access_trace.h"
#include "storage/hdf5/durable_replace.h"

namespace sy::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Creates checkpoint.dir and the parents of log.metrics and log.routing_trace, and checks that
// those files open for appending: rank 0 writes them, and finds out now rather than after the run.
Status PrepareOutputs(const TrainConfig& config) {
  const std::string& dir = config.checkpoint.dir;
  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return InvalidArgumentError("config: 'checkpoint.dir' " + dir + ": cannot create (" +
                                  ec.message() + "); choose a writable directory");
    }
  }
  for (const std::string* path : {&config.log.metrics, &config.log.routing_trace}) {
    if (path->empty()) continue;
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(*path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    Result<UniqueFd> opened =
        ec ? Result<UniqueFd>(ErrnoError("create the directory of", *path, ec.value()))
           : OpenForAppend(*path);
    if (!opened.ok()) {
      return InvalidArgumentError("config: '" + *path +
                                  "' (log.metrics or log.routing_trace) cannot be opened for "
                                  "writing (" +
                                  opened.status().message() + "); choose a writable path");
    }
  }
  return Status::Ok();
}

// Removes all but the newest `keep` checkpoints in `dir` (names sort by step).
void PruneCheckpoints(const std::string& dir, int keep) {
  std::vector<std::string> all;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (IsCheckpointFileName(e.path().filename().string())) all.push_back(e.path().string());
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    std::filesystem::remove(all[i]);
  }
}

// "SIGTERM" for people.
std::string SignalName(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case kStopRequestedByCaller:
      return "the caller's request";
    default:
      return "signal " + std::to_string(signal);
  }
}

// eval_tasks: per task of `dataset`, its exact match and token accuracy (`switchyard plot` draws
// them).
nlohmann::json EvalLine(const EvalReport& e, const Dataset& dataset) {
  nlohmann::json tasks = nlohmann::json::object();
  for (int t = 0; t < e.accuracy.num_tasks(); ++t) {
    tasks[std::string(dataset.task_name(t))] = {
        {"exact_match", e.accuracy.task(t).exact_match()},
        {"token_accuracy", e.accuracy.task(t).token_accuracy()}};
  }
  return {{"step", e.step},
          {"eval_loss", e.loss},
          {"eval_exact_match", e.accuracy.total().exact_match()},
          {"eval_tasks", std::move(tasks)}};
}

// One run of the loop over a trainer: its outputs and the progress it prints.
class TrainingLoop {
 public:
  TrainingLoop(Trainer& trainer, std::FILE* out, const TrainingLoopOptions& options)
      : trainer_(trainer), config_(trainer.config()), out_(out), options_(options) {}

  Result<TrainingOutcome> Run() {
    SY_RETURN_IF_ERROR(
        trainer_.BroadcastRootStatus(trainer_.is_root() ? PrepareOutputs(config_) : Status::Ok()));
    SY_RETURN_IF_ERROR(
        trainer_.BroadcastRootStatus(trainer_.is_root() ? TakeCheckpointDir() : Status::Ok()));
    if (config_.checkpoint.resume || !config_.checkpoint.resume_from.empty()) {
      SY_RETURN_IF_ERROR(Resume());
    }
    if (!config_.log.metrics.empty() && trainer_.is_root()) {
      Result<UniqueFd> opened = OpenForAppend(config_.log.metrics);
      if (!opened.ok()) {
        return InvalidArgumentError("config: 'log.metrics' " + config_.log.metrics +
                                    ": cannot open for writing (" + opened.status().message() +
                                    "); choose a writable path");
      }
      metrics_ = std::move(*opened);
    }
    style_ = config_.log.progress;
    if (style_ == ProgressStyle::kAuto) {
      style_ = isatty(fileno(out_)) ? ProgressStyle::kBar : ProgressStyle::kLines;
    }
    const int64_t total = config_.train.steps;
    const int64_t first = trainer_.step();
    if (resumed_ && first >= total) {
      std::fprintf(
          out_,
          "nothing to train: the checkpoint is at step %lld and train.steps is %lld; "
          "raise train.steps (--set train.steps=N) to train further%s\n",
          static_cast<long long>(first), static_cast<long long>(total),
          ResumedFromElsewhere() ? " (the loaded state is saved into checkpoint.dir)" : "");
    }
    if (trainer_.per_task_batches()) {
      std::fprintf(out_, "%s\n", trainer_.PlacementSummary().c_str());
    }
    start_ = Clock::now();
    int64_t tokens = 0;
    while (trainer_.step() < total) {
      SY_ASSIGN_OR_RETURN(StepReport r, trainer_.Step());
      const int64_t step = trainer_.step();
      tokens += r.tokens;
      const double elapsed = Seconds(start_, Clock::now());
      const double tok_s = elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0.0;
      const double eta = (step > first) ? elapsed / static_cast<double>(step - first) *
                                              static_cast<double>(total - step)
                                        : 0.0;
      const bool log_now = step % config_.log.every == 0 || step == total || step == first + 1;
      if (log_now) LogStep(r, tok_s);
      PrintProgress(r, total, tok_s, eta, log_now);
      if (!r.placement_change.empty()) {
        if (style_ == ProgressStyle::kBar) std::fprintf(out_, "\n");
        std::fprintf(out_, "%s\n", r.placement_change.c_str());
        AppendMetrics(nlohmann::json({{"step", step}, {"rebalance", r.placement_change}}));
      }
      if (config_.train.eval_every > 0 && step % config_.train.eval_every == 0 && step < total) {
        SY_ASSIGN_OR_RETURN(EvalReport e, trainer_.Evaluate());
        if (style_ == ProgressStyle::kBar) std::fprintf(out_, "\n");
        std::fprintf(out_, "eval step %lld loss %.4f: %s\n", static_cast<long long>(step), e.loss,
                     e.summary.c_str());
        LogEval(e);
      }
      SY_ASSIGN_OR_RETURN(
          const int64_t stop,
          trainer_.BroadcastRootValue(options_.stop != nullptr ? options_.stop->load() : 0));
      if (stop != 0 && step < total) return Stop(static_cast<int>(stop));
      const int64_t every = config_.checkpoint.every;
      if (every > 0 && step % every == 0 && step < total) SY_RETURN_IF_ERROR(Save(false));
    }
    if (style_ == ProgressStyle::kBar) std::fprintf(out_, "\n");
    // A resumed run that took no step has its checkpoint already, unless it resumed from a file
    // other than the one it would write: then it saves what it loaded, laid out by this run's
    // world (a resharding through the trainer's own load and save).
    if (!resumed_ || trainer_.step() > first || ResumedFromElsewhere()) {
      SY_RETURN_IF_ERROR(Save(true));
    }
    if (!config_.log.routing_trace.empty() && trainer_.is_root()) {
      SY_RETURN_IF_ERROR(
          storage::WriteTraceFile(config_.log.routing_trace, trainer_.routing_trace()));
      std::fprintf(out_, "routing trace %s (%u steps)\n", config_.log.routing_trace.c_str(),
                   trainer_.routing_trace().num_steps());
    }
    SY_ASSIGN_OR_RETURN(EvalReport final_eval, trainer_.Evaluate());
    // With an expert store: every expert's state brought up to date and written back.
    SY_RETURN_IF_ERROR(trainer_.ConsolidateExperts());
    LogEval(final_eval);
    std::fprintf(out_, "final step %lld eval loss %.4f time %.1fs accuracy: %s\n",
                 static_cast<long long>(trainer_.step()), final_eval.loss,
                 Seconds(start_, Clock::now()), final_eval.summary.c_str());
    TrainingOutcome outcome;
    outcome.final_eval = std::move(final_eval);
    return outcome;
  }

 private:
  // Rank 0 locks checkpoint.dir for this run and removes the temporaries of dead writers.
  Status TakeCheckpointDir() {
    const std::string& dir = config_.checkpoint.dir;
    if (dir.empty()) return Status::Ok();
    std::string warning;
    DirectoryLockOptions lock;
    lock.wait = config_.train.wait_for_lock;
    lock.out = out_;
    lock.stop = options_.stop;
    SY_ASSIGN_OR_RETURN(dir_lock_, DirectoryLock::Acquire(dir, lock, &warning));
    if (!warning.empty()) std::fprintf(out_, "warning: %s\n", warning.c_str());
    SY_ASSIGN_OR_RETURN(std::vector<std::string> removed, RemoveStaleTemporaryFiles(dir));
    for (const std::string& path : removed) {
      std::fprintf(out_, "removed %s, left by a save that was killed\n", path.c_str());
    }
    return Status::Ok();
  }

  // Rank 0 picks the checkpoints to try, newest first (or checkpoint.resume_from alone); every
  // rank loads the first that verifies (LoadCheckpoint is collective; rank 0 reads the file).
  Status Resume() {
    const std::string& dir = config_.checkpoint.dir;
    const std::string& from = config_.checkpoint.resume_from;
    if (dir.empty() && from.empty()) {
      return InvalidArgumentError(
          "config: 'checkpoint.resume' is true but 'checkpoint.dir' is empty; set checkpoint.dir");
    }
    std::vector<std::string> candidates;
    Status found = Status::Ok();
    if (trainer_.is_root()) {
      if (!from.empty()) {
        candidates.push_back(from);
      } else {
        Result<std::vector<std::string>> all = ListCheckpoints(dir);
        if (all.ok()) candidates = std::move(*all);
        found = all.status();
      }
    }
    SY_RETURN_IF_ERROR(trainer_.BroadcastRootStatus(found));
    std::string resumed_from;
    for (size_t i = 0;; ++i) {
      const std::string path = i < candidates.size() ? candidates[i] : "";
      const Status loaded = trainer_.LoadCheckpoint(path);
      if (loaded.ok()) {
        resumed_from = path;
        break;
      }
      // A checkpoint of another config, or a file named on purpose, ends the resume; a damaged
      // one gives way to the one before it.
      const bool damaged = loaded.code() != StatusCode::kFailedPrecondition && from.empty();
      const bool more = i + 1 < candidates.size();
      SY_ASSIGN_OR_RETURN(const int64_t go_on, trainer_.BroadcastRootValue(damaged && more));
      if (go_on == 0) {
        if (i == 0 || !damaged) return loaded;
        return Status(loaded.code(), loaded.message() + "; no checkpoint in " + dir +
                                         " verifies: start without --resume");
      }
      if (trainer_.is_root()) {
        std::fprintf(out_, "warning: skipping checkpoint %s: %s\n", path.c_str(),
                     loaded.ToString().c_str());
      }
    }
    resumed_ = true;
    bool elsewhere = false;
    if (trainer_.is_root() && !dir.empty()) {
      std::error_code ec;  // a target that does not exist is elsewhere too
      elsewhere =
          !std::filesystem::equivalent(resumed_from, CheckpointPath(dir, trainer_.step()), ec);
    }
    SY_ASSIGN_OR_RETURN(const int64_t resave, trainer_.BroadcastRootValue(elsewhere ? 1 : 0));
    resumed_elsewhere_ = resave != 0;
    const long long step = static_cast<long long>(trainer_.step());
    if (trainer_.is_root()) {
      std::fprintf(out_, "resumed from %s at step %lld\n", resumed_from.c_str(), step);
    } else {
      std::fprintf(out_, "resumed at step %lld\n", step);
    }
    return Status::Ok();
  }

  // Stopped by `signal` after a step: a checkpoint of it, and the line that says so.
  Result<TrainingOutcome> Stop(int signal) {
    if (style_ == ProgressStyle::kBar) std::fprintf(out_, "\n");
    const std::string name = SignalName(signal);
    if (config_.checkpoint.dir.empty()) {
      std::fprintf(out_,
                   "stopped by %s at step %lld; no checkpoint written (checkpoint.dir is not "
                   "set)\n",
                   name.c_str(), static_cast<long long>(trainer_.step()));
    } else {
      SY_RETURN_IF_ERROR(Save(true));
      std::fprintf(out_, "stopped by %s at step %lld; continue with --resume\n", name.c_str(),
                   static_cast<long long>(trainer_.step()));
    }
    std::fflush(out_);
    TrainingOutcome outcome;
    outcome.stopped_by_signal = signal;
    return outcome;
  }

  // True when the run resumed from a checkpoint other than the file a save of its current step
  // writes (--resume-from a file elsewhere, or a sharded checkpoint's directory).
  // Decided on rank 0 in Resume and broadcast, so every rank takes the collective save.
  bool ResumedFromElsewhere() const { return resumed_elsewhere_; }

  // Writes a checkpoint of the current step into checkpoint.dir, if there is one.
  Status Save(bool final_save) {
    const CheckpointOptions& ck = config_.checkpoint;
    if (ck.dir.empty()) return Status::Ok();
    const std::string path = CheckpointPath(ck.dir, trainer_.step());
    SY_RETURN_IF_ERROR(trainer_.SaveCheckpoint(path));
    if (style_ == ProgressStyle::kBar && !final_save) std::fprintf(out_, "\n");
    std::fprintf(out_, "checkpoint %s\n", path.c_str());
    if (ck.keep > 0 && trainer_.is_root()) PruneCheckpoints(ck.dir, ck.keep);
    return Status::Ok();
  }

  // Whether this rank records metrics: rank 0, with log.metrics or an on_metrics callback.
  bool RecordsMetrics() const {
    return metrics_.valid() || (options_.on_metrics && trainer_.is_root());
  }

  void LogStep(const StepReport& r, double tok_s) {
    if (!RecordsMetrics()) return;
    nlohmann::json line = {{"step", r.step},
                           {"loss", r.loss},
                           {"ce_loss", r.ce_loss},
                           {"aux_loss", r.aux_loss},
                           {"lr", r.lr},
                           {"grad_norm", r.grad_norm},
                           {"tokens_per_s", tok_s},
                           {"skipped", r.skipped},
                           {"skipped_steps", r.skipped_steps},
                           {"expert_load", r.expert_load},
                           {"step_seconds", r.seconds},
                           {"task_rows", r.task_rows},
                           {"phase_seconds",
                            {{"data", r.data_seconds},
                             {"forward", r.forward_seconds},
                             {"backward", r.backward_seconds},
                             {"optimizer", r.optimizer_seconds},
                             {"communication", r.communication_seconds}}}};
    if (r.loss_scale > 0) line["loss_scale"] = r.loss_scale;
    if (r.has_expert_store) {
      const uint64_t accesses = r.expert_cache_hits + r.expert_cache_misses;
      line["expert_store"] = {
          {"hit_rate", accesses > 0 ? static_cast<double>(r.expert_cache_hits) / accesses : 1.0},
          {"hits", r.expert_cache_hits},
          {"misses", r.expert_cache_misses},
          {"prefetched", r.expert_prefetched},
          {"bytes_read", r.store_bytes_read},
          {"bytes_written", r.store_bytes_written},
          {"wait_seconds", r.expert_wait_seconds},
          {"read_seconds", r.store_read_seconds},
          {"hidden_fraction", HiddenFraction(r.store_read_seconds, r.store_read_exposed_seconds)},
          {"write_seconds", r.store_write_seconds},
          {"update_seconds", r.store_update_seconds},
          {"end_step_seconds", r.store_end_step_seconds},
          {"prefetch_failed", r.prefetch_failed},
          {"working_set_bytes", r.expert_working_set_bytes},
          {"replica_gradients", r.expert_replica_gradients}};
    }
    AppendMetrics(line);
  }

  void LogEval(const EvalReport& e) {
    if (RecordsMetrics()) AppendMetrics(EvalLine(e, trainer_.dataset()));
  }

  // One line of log.metrics, when it is set, and the on_metrics callback (rank 0). A failed write
  // (a full disk) is reported once and the run goes on: the metrics are a record, not the run's
  // state.
  void AppendMetrics(const nlohmann::json& line) {
    if (options_.on_metrics && trainer_.is_root()) options_.on_metrics(line.dump());
    if (!metrics_.valid()) return;
    const Status written = WriteAll(metrics_.get(), config_.log.metrics, line.dump() + "\n");
    if (!written.ok() && !metrics_failed_) {
      std::fprintf(out_, "warning: log.metrics: %s\n", written.message().c_str());
      metrics_failed_ = true;
    }
  }

  void PrintProgress(const StepReport& r, int64_t total, double tok_s, double eta, bool log_now) {
    if (style_ == ProgressStyle::kBar) {
      const int width = 30;
      const int filled = static_cast<int>(width * r.step / total);
      std::fprintf(out_, "\r[%s%s] step %lld/%lld loss %.4f %.0f tok/s ETA %.0fs ",
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                   static_cast<long long>(r.step), static_cast<long long>(total), r.loss, tok_s,
                   eta);
      std::fflush(out_);
    } else if (style_ == ProgressStyle::kLines && log_now) {
      std::fprintf(out_,
                   "step %lld/%lld loss %.4f aux %.4f lr %.3g grad_norm %.3f %.0f tok/s "
                   "ETA %.0fs\n",
                   static_cast<long long>(r.step), static_cast<long long>(total), r.loss,
                   r.aux_loss, r.lr, r.grad_norm, tok_s, eta);
      std::fflush(out_);
    }
  }

  Trainer& trainer_;
  const TrainConfig& config_;
  std::FILE* out_;
  TrainingLoopOptions options_;
  std::unique_ptr<DirectoryLock> dir_lock_;  // rank 0's, with checkpoint.dir
  bool resumed_ = false;
  // Resumed from a checkpoint other than the file a save of the resumed step writes
  // (--resume-from a file elsewhere, or a sharded checkpoint's directory).
  bool resumed_elsewhere_ = false;
  ProgressStyle style_ = ProgressStyle::kLines;
  UniqueFd metrics_;  // rank 0's log.metrics (appended to), when set
  bool metrics_failed_ = false;
  Clock::time_point start_;
};

}  // namespace

Result<TrainingOutcome> RunTrainingLoop(Trainer& trainer, std::FILE* out,
                                        const TrainingLoopOptions& options) {
  return TrainingLoop(trainer, out, options).Run();
}

}  // namespace sy::launcher
