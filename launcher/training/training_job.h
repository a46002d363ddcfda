// RunTrainingJob: `switchyard train` as one library call. It loads the config, joins the MPI job
// when the process was started by mpirun (the world's size is the number of ranks; the config's
// "parallel" block says how they split the model, docs/parallel.md), creates the Trainer
// (trainer.h), prints the model's size and the parallel layout, and runs RunTrainingLoop
// (training_loop.h).
//
// Output: rank 0 prints to stdout as one process does; the other ranks print nothing unless
// log_all_ranks, when every rank prints with each line prefixed "[rank r] " (rank_output.h).
//
// Errors. A config that does not load fails on every rank before MPI starts: the result says to
// report it on rank 0 only. In a distributed run any later error ends the whole job
// (MpiEnvironment::AbortJob: "error: <message>" from the rank that saw it, exit status 1), so no
// rank is left waiting in a collective, and this call does not return; a rank that dies (SIGKILL)
// ends the job through mpirun, and a collective that waits longer than parallel.timeout_s for a
// peer aborts it. In one process every error is returned.
//
// Ownership: value types. Thread-safety: once per process, from the main thread (MPI is
// initialised and finalised inside).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/status.h"

namespace sy::launcher {

struct TrainingJobOptions {
  // The JSON config (docs/training.md). Required: a file, or its text in config_text.
  std::string config_path;
  // Default: empty. When set, the config's JSON text, read instead of config_path (which then
  // only names it in messages): the Python API's train() with a dict.
  std::string config_text;
  std::vector<std::string> overrides;  // "key=value", applied in order. Default: none
  // Default: false. Continue from the newest checkpoint in checkpoint.dir that verifies.
  bool resume = false;
  // Default: none. Continue from this checkpoint file (checkpoint.resume_from).
  std::string resume_from;
  bool log_all_ranks = false;  // Default: false. Under mpirun every rank prints, prefixed
  // Default: none. Asks the run to stop after the current step, with a checkpoint
  // (TrainingLoopOptions::stop); not owned.
  const std::atomic<int>* stop = nullptr;
  // Default: none. Each metrics record, on rank 0 (TrainingLoopOptions::on_metrics).
  std::function<void(const std::string& json)> on_metrics;
};

struct TrainingJobResult {
  Status status;
  // Whether this process should print `status` when it is an error: false on the ranks other
  // than 0 when every rank failed the same way, so that the job prints the error once.
  bool report_error = true;
};

TrainingJobResult RunTrainingJob(const TrainingJobOptions& options);

}  // namespace sy::launcher
