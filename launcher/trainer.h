// Trainer: single-process training of an MoeModel on one Backend (cpu or sim; cuda when built).
//
// One step: the next train batch from the Batcher -> ZeroGrads -> Forward -> Backward -> global
// gradient-norm clipping -> AdamW (or Adam/SGD) over fp32 master weights at the learning rate of
// the warmup + decay schedule. On a host backend the model's f32 parameters are the masters and are
// updated in place; on another backend the trainer keeps host masters and copies the updated
// values back after each step. A step whose gradient norm is inf or NaN is skipped (no update).
//
// Evaluation runs train.eval_batches held-out batches (the batcher is rewound first, so every
// evaluation sees the same examples) and reports the loss and the per-task accuracy of the argmax
// predictions.
//
// Checkpoints (see TrainCheckpoint below) hold the effective config, the step, the init seed (the
// loop draws no other randomness), the data position, every parameter under the model's names
// (experts under global ids) and the optimizer state, so a resumed run is bit-identical to one
// that never stopped (on cpu, at a fixed thread count).
//
// Ownership: the Trainer owns its backend, model, dataset, batchers, optimizer and states.
// Thread-safety: none; one thread drives a Trainer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "launcher/train_checkpoint.h"
#include "launcher/train_options.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "runtime/backend/backend.h"
#include "runtime/core/thread_pool.h"
#include "runtime/data/batcher.h"
#include "runtime/data/dataset.h"
#include "runtime/data/task_accuracy.h"
#include "runtime/model/moe_model.h"
#include "storage/access_trace.h"

namespace sy::launcher {

struct StepReport {
  int64_t step = 0;  // steps taken after this one
  float loss = 0;    // total loss of the batch (CE + weighted router losses)
  float ce_loss = 0;
  float aux_loss = 0;
  double lr = 0;
  float grad_norm = 0;           // before clipping
  bool skipped = false;          // non-finite gradient: no update
  int64_t tokens = 0;            // tokens in the batch
  double seconds = 0;            // wall time of the step, and its phases:
  double data_seconds = 0;       // next batch
  double forward_seconds = 0;    // ZeroGrads + Forward
  double backward_seconds = 0;   // Backward (+ gradient copies to the host)
  double optimizer_seconds = 0;  // clipping + optimizer (+ value copies back)
  // Per MoE layer, the token-slots routed to each expert in this step.
  std::vector<std::vector<int64_t>> expert_load;
};

struct EvalReport {
  int64_t step = 0;
  float loss = 0;  // mean CE over the evaluated batches
  TaskAccuracy accuracy{1};
  std::string summary;  // TaskAccuracy::ToString
};

class Trainer {
 public:
  // Opens the dataset, creates the backend and the model (vocab_size 0 takes the dataset's),
  // initialises the parameters from train.seed, and builds the optimizer and schedule. Errors
  // name the config key.
  static Result<std::unique_ptr<Trainer>> Create(const TrainConfig& config);
  ~Trainer();

  // One optimizer step on the next train batch (recording its routing with log.routing_trace).
  Result<StepReport> Step();
  // Loss and per-task accuracy on train.eval_batches held-out batches.
  Result<EvalReport> Evaluate();

  // Writes a checkpoint of the current state to `path` (atomically: a crash leaves either the old
  // file or the new one).
  Status SaveCheckpoint(const std::string& path);
  // Restores the state saved at `path`. NotFound for a missing file, DataLoss for a truncated or
  // corrupt one, FailedPrecondition naming the differing key when it was written for another
  // model or data config.
  Status LoadCheckpoint(const std::string& path);

  // The whole run: resume when checkpoint.resume, then steps up to train.steps with progress on
  // `out`, metrics to log.metrics, evaluations every train.eval_every and at the end,
  // checkpoints every checkpoint.every and at the end. Returns the final evaluation.
  Result<EvalReport> Run(std::FILE* out);

  int64_t step() const { return step_; }
  const TrainConfig& config() const { return config_; }
  MoeModel& model() { return *model_; }
  // The routing recorded so far by this process (log.routing_trace).
  const storage::AccessTrace& routing_trace() const { return trace_; }
  const Dataset& dataset() const { return *dataset_; }
  // Every parameter's current fp32 value, in ParameterStore order (a host copy).
  std::vector<std::vector<float>> ParameterValues();

 private:
  struct ParamState {
    Parameter* param = nullptr;
    Tensor host_value;  // the master: aliases param->value on a host backend
    Tensor host_grad;   // aliases param->grad on a host backend
    std::vector<float> m, v;
    int64_t opt_step = 0;
  };

  explicit Trainer(const TrainConfig& config) : config_(config) {}
  Status Init();
  // Appends the routing of the last Forward's first log.routing_trace_tokens tokens to trace_.
  void RecordRouting();
  // FailedPrecondition naming the first model or data key in which `saved_json` (a
  // checkpoint's config) differs from this run's.
  Status CheckCheckpointConfig(const std::string& path, const std::string& saved_json);
  bool host_backend() const;

  TrainConfig config_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Dataset> dataset_;
  std::unique_ptr<Batcher> train_batcher_, eval_batcher_;
  std::unique_ptr<MoeModel> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::vector<ParamState> states_;
  Batch batch_;
  int64_t step_ = 0;
  storage::AccessTrace trace_;  // with log.routing_trace
};

}  // namespace sy::launcher
