// RunTrainingLoop: the whole run of a Trainer, as `switchyard train` makes it: resume when
// checkpoint.resume, then steps up to train.steps with progress on `out` (a bar rewritten in place
// or plain lines, log.progress), JSON-lines metrics to log.metrics, evaluations every
// train.eval_every and at the end, checkpoints every checkpoint.every and at the end (the newest
// checkpoint.keep kept), the routing trace to log.routing_trace at the end. It ends with the line
// "final step N eval loss L time Ts accuracy: <per-task accuracy>" and returns the final
// evaluation.
//
// The metrics file (docs/training.md): per logged step {"step", "loss", "ce_loss", "aux_loss",
// "lr", "grad_norm", "tokens_per_s", "skipped", "expert_load", "step_seconds", "phase_seconds":
// {"data", "forward", "backward", "optimizer", "communication"}}; per evaluation {"step",
// "eval_loss", "eval_exact_match", "eval_tasks": {task: {"exact_match", "token_accuracy"}}}. A
// step is logged every log.every steps, at the first step and at the last.
//
// checkpoint.dir. Rank 0 locks it for the run (directory_lock.h: a second run on the same
// directory is refused, naming the first one's pid and host), then removes the temporary files
// that writers killed mid-save left there ("step-N.h5.tmp.PID" of a process that is gone), saying
// so.
//
// Resume (checkpoint.resume, or checkpoint.resume_from naming one file): from the newest
// checkpoint in checkpoint.dir that loads and verifies; a newer one that does not (truncated,
// corrupt) is skipped with a warning naming it and why, and the next older one is tried. A
// checkpoint written for another config stops the resume (older ones would not fit either).
// When train.steps is not above the resumed step, the loop says there is nothing to train and
// writes no new checkpoint.
//
// Stopping (TrainingLoopOptions::stop, set from SIGTERM or SIGINT): the step under way finishes,
// a checkpoint of it is written (with checkpoint.dir), the loop says so and returns without the
// final evaluation.
//
// Errors: InvalidArgument naming the key when checkpoint.resume is set without checkpoint.dir or
// an output cannot be created (checked before the first step); FailedPrecondition when another
// run holds checkpoint.dir; NotFound when there is no checkpoint to resume from, and the last
// checkpoint's error when none verifies; the trainer's errors otherwise.
//
// Distributed: collective over the trainer's world. Every rank prints its progress to its `out`
// (the same global numbers); only rank 0 writes metrics, checkpoints and the routing trace, and
// its failures to do so end the call on every rank.
// Ownership: borrows `trainer` and `out` for the call. Thread-safety: the trainer's thread.
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

#include "launcher/training/trainer.h"

namespace sy::launcher {

// TrainingLoopOptions::stop's value when the caller asks the run to stop, not a signal (the Python
// API, when its on_metrics callback raised).
inline constexpr int kStopRequestedByCaller = -1;

struct TrainingLoopOptions {
  // Read after every step (not owned; set from a signal handler): nonzero, the number of the
  // signal that asks the run to stop, or kStopRequestedByCaller. Distributed, rank 0's value
  // decides for every rank. Default: none (the run never stops early).
  const std::atomic<int>* stop = nullptr;
  // Called on rank 0 with each record of log.metrics (one JSON object, as the file's line without
  // its newline), whether or not log.metrics is set: the Python API's on_metrics. It runs on the
  // training thread between steps; the run waits for it. Default: none.
  std::function<void(const std::string& json)> on_metrics;
};

struct TrainingOutcome {
  std::optional<EvalReport> final_eval;  // the final evaluation; absent when stopped early
  int stopped_by_signal = 0;             // the signal that stopped the run early, else 0
};

Result<TrainingOutcome> RunTrainingLoop(Trainer& trainer, std::FILE* out,
                                        const TrainingLoopOptions& options = {});

}  // namespace sy::launcher
