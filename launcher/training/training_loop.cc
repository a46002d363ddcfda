#include "launcher/training/training_loop.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "storage/cache/access_trace.h"

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
    if (ec || !std::ofstream(*path, std::ios::app)) {
      return InvalidArgumentError("config: '" + *path +
                                  "' (log.metrics or log.routing_trace) cannot be opened for "
                                  "writing; choose a writable path");
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

nlohmann::json EvalLine(const EvalReport& e) {
  return {{"step", e.step},
          {"eval_loss", e.loss},
          {"eval_exact_match", e.accuracy.total().exact_match()}};
}

// One run of the loop over a trainer: its outputs and the progress it prints.
class TrainingLoop {
 public:
  TrainingLoop(Trainer& trainer, std::FILE* out)
      : trainer_(trainer), config_(trainer.config()), out_(out) {}

  Result<EvalReport> Run() {
    if (config_.checkpoint.resume) SY_RETURN_IF_ERROR(Resume());
    SY_RETURN_IF_ERROR(
        trainer_.BroadcastRootStatus(trainer_.is_root() ? PrepareOutputs(config_) : Status::Ok()));
    if (!config_.log.metrics.empty() && trainer_.is_root()) {
      metrics_.open(config_.log.metrics, std::ios::app);
      if (!metrics_) {
        return InvalidArgumentError("config: 'log.metrics' " + config_.log.metrics +
                                    ": cannot open for writing; choose a writable path");
      }
    }
    style_ = config_.log.progress;
    if (style_ == ProgressStyle::kAuto) {
      style_ = isatty(fileno(out_)) ? ProgressStyle::kBar : ProgressStyle::kLines;
    }
    const int64_t total = config_.train.steps;
    const int64_t first = trainer_.step();
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
      if (config_.train.eval_every > 0 && step % config_.train.eval_every == 0 && step < total) {
        SY_ASSIGN_OR_RETURN(EvalReport e, trainer_.Evaluate());
        if (style_ == ProgressStyle::kBar) std::fprintf(out_, "\n");
        std::fprintf(out_, "eval step %lld loss %.4f: %s\n", static_cast<long long>(step), e.loss,
                     e.summary.c_str());
        LogEval(e);
      }
      const int64_t every = config_.checkpoint.every;
      if (every > 0 && step % every == 0 && step < total) SY_RETURN_IF_ERROR(Save(false));
    }
    if (style_ == ProgressStyle::kBar) std::fprintf(out_, "\n");
    SY_RETURN_IF_ERROR(Save(true));
    if (!config_.log.routing_trace.empty() && trainer_.is_root()) {
      SY_RETURN_IF_ERROR(
          storage::WriteTraceFile(config_.log.routing_trace, trainer_.routing_trace()));
      std::fprintf(out_, "routing trace %s (%u steps)\n", config_.log.routing_trace.c_str(),
                   trainer_.routing_trace().num_steps());
    }
    SY_ASSIGN_OR_RETURN(EvalReport final_eval, trainer_.Evaluate());
    LogEval(final_eval);
    std::fprintf(out_, "final step %lld eval loss %.4f time %.1fs accuracy: %s\n",
                 static_cast<long long>(trainer_.step()), final_eval.loss,
                 Seconds(start_, Clock::now()), final_eval.summary.c_str());
    return final_eval;
  }

 private:
  // Rank 0 finds the latest checkpoint in checkpoint.dir and reads it; the other ranks receive it.
  Status Resume() {
    const std::string& dir = config_.checkpoint.dir;
    if (dir.empty()) {
      return InvalidArgumentError(
          "config: 'checkpoint.resume' is true but 'checkpoint.dir' is empty; set checkpoint.dir");
    }
    std::string latest;
    Status found = Status::Ok();
    if (trainer_.is_root()) {
      Result<std::string> r = LatestCheckpoint(dir);
      if (r.ok()) latest = *r;
      found = r.status();
    }
    SY_RETURN_IF_ERROR(trainer_.BroadcastRootStatus(found));
    SY_RETURN_IF_ERROR(trainer_.LoadCheckpoint(latest));
    const long long step = static_cast<long long>(trainer_.step());
    if (trainer_.is_root()) {
      std::fprintf(out_, "resumed from %s at step %lld\n", latest.c_str(), step);
    } else {
      std::fprintf(out_, "resumed at step %lld\n", step);
    }
    return Status::Ok();
  }

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

  void LogStep(const StepReport& r, double tok_s) {
    if (!metrics_.is_open()) return;
    nlohmann::json line = {{"step", r.step},
                           {"loss", r.loss},
                           {"ce_loss", r.ce_loss},
                           {"aux_loss", r.aux_loss},
                           {"lr", r.lr},
                           {"grad_norm", r.grad_norm},
                           {"tokens_per_s", tok_s},
                           {"skipped", r.skipped},
                           {"expert_load", r.expert_load},
                           {"step_seconds", r.seconds},
                           {"phase_seconds",
                            {{"data", r.data_seconds},
                             {"forward", r.forward_seconds},
                             {"backward", r.backward_seconds},
                             {"optimizer", r.optimizer_seconds},
                             {"communication", r.communication_seconds}}}};
    metrics_ << line.dump() << "\n";
    metrics_.flush();
  }

  void LogEval(const EvalReport& e) {
    if (metrics_.is_open()) metrics_ << EvalLine(e).dump() << "\n";
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
  ProgressStyle style_ = ProgressStyle::kLines;
  std::ofstream metrics_;  // rank 0's log.metrics, when set
  Clock::time_point start_;
};

}  // namespace

Result<EvalReport> RunTrainingLoop(Trainer& trainer, std::FILE* out) {
  return TrainingLoop(trainer, out).Run();
}

}  // namespace sy::launcher
