// Trainer: training of an MoeModel on one Backend (cpu or sim; cuda when built), in one process or
// as one rank of an MPI job (`mpirun -np W switchyard train`). The loop around it (progress,
// metrics, evaluation and checkpoint cadence, resume) is RunTrainingLoop (training_loop.h).
//
// One step (Step, trainer_step.cc): the next train batch from the Batcher -> ZeroGrads -> Forward
// -> Backward (once per micro-batch with train.micro_batches: Note [micro-batches] below) ->
// global gradient-norm clipping -> AdamW (or Adam/SGD) over fp32 master weights at the learning
// rate of the warmup + decay schedule. On a host backend the model's f32 parameters
// are the masters and are updated in place; on another backend the trainer keeps host masters and
// copies the updated values back after each step (param_state.h). A step whose gradient norm is
// inf or NaN is skipped (no update).
//
// Distributed (a world of W > 1 ranks given to Create): every rank takes rows
// [r*B/W, (r+1)*B/W) of the same global batch of B rows (data.batch_size, which W must divide);
// the experts, ZeRO-3, the embedding partition and the collectives of the step are the
// DistributedRank's (distributed_rank.h). A world of 1 is the single-process trainer, bit for bit.
//
// Note [micro-batches]. With train.micro_batches K each rank's rows are cut into K equal
// micro-batches, each run forward and backward with the gradients summed in f32. Each row's
// cross-entropy is weighted by 1 / (the rank's targets in the step) (per-task batches: their own
// weights), so the K passes sum to the rank's mean, exactly what one pass computes; the router's
// aux and z gradients are scaled by 1 / K (MoeModel::set_router_loss_scale): z, a mean over
// tokens, is then exact, and aux is the mean of each micro-batch's own (Megatron-LM's rule).
//
// Precision (train.precision, Note [mixed precision] in runtime/model/moe_model.h): in bf16 and
// f16 the model holds the 16-bit compute copy, ParamState the f32 masters (param_state.h), and the
// optimizer writes the copy in its update pass; f16 multiplies the loss by the DynamicLossScaler's
// scale (folded into the row weights and the router scale above), and the unscale rides on the
// clipping's multiplication (UnscaleAndClipGradNorm); a step with an inf or NaN gradient is
// skipped and backs the scale off.
//
// Evaluation (Evaluate, trainer_evaluation.cc) runs train.eval_batches held-out batches (the
// batcher is rewound first, so every evaluation sees the same examples) and reports the loss and
// the per-task accuracy of the argmax predictions. In a distributed run every rank evaluates the
// whole batches (the expert layers are collective), so every rank gets the same report.
//
// Checkpoints (SaveCheckpoint / LoadCheckpoint, trainer_checkpointing.cc; the file is
// train_checkpoint.h) hold the effective config, the step, the init seed (the loop draws no other
// randomness), the data position, every parameter under the model's names (experts under global
// ids) and the optimizer state, so a resumed run is bit-identical to one that never stopped (on
// cpu, at a fixed thread count). A distributed run writes the same file from rank 0 (the experts
// streamed from their owners one tensor at a time, ZeRO-3's shards and the embedding columns
// consolidated), so one process or `switchyard generate` loads it; a distributed resume reads it
// on rank 0, broadcasts the dense parameters and sends each expert tensor to the ranks that hold
// it.
//
// Expert store (config block expert_store, expert_state_store.h): the experts' optimizer states
// live in a store file per rank behind the MoESys LFU CPU cache; the model's expert tensors stay
// the compute copy. Exact by default (bit-identical to in-memory training); a checkpoint
// consolidates the experts' states into the same file an in-memory run writes.
//
// Ownership: the Trainer owns its backend, model, dataset, batchers, optimizer and states, and its
// DistributedRank; it does not own the world communicator, which must outlive it.
// Thread-safety: none; one thread drives a Trainer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "launcher/training/device_adam.h"
#include "launcher/training/directory_lock.h"
#include "launcher/training/elastic_planner.h"
#include "launcher/training/expert_state_store.h"
#include "launcher/training/expert_working_set.h"
#include "launcher/training/param_state.h"
#include "launcher/training/task_placement.h"
#include "launcher/training/train_checkpoint.h"
#include "launcher/training/train_options.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/communicator.h"
#include "runtime/backend/backend.h"
#include "runtime/core/thread_pool.h"
#include "runtime/data/batcher.h"
#include "runtime/data/dataset.h"
#include "runtime/data/task_accuracy.h"
#include "runtime/data/task_batches.h"
#include "runtime/model/moe_model.h"
#include "storage/cache/access_trace.h"

namespace sy::launcher {

class DistributedRank;
class StepTimer;  // trainer_step.cc

struct StepReport {
  int64_t step = 0;  // steps taken after this one
  float loss = 0;    // total loss of the batch (CE + weighted router losses)
  float ce_loss = 0;
  float aux_loss = 0;
  double lr = 0;
  float grad_norm = 0;           // before clipping
  bool skipped = false;          // non-finite gradient: no update
  int64_t skipped_steps = 0;     // steps skipped so far in this run (this one included)
  float loss_scale = 0;          // train.precision f16: the loss scale this step ran with; else 0
  int64_t tokens = 0;            // tokens in the (global) batch
  double seconds = 0;            // wall time of the step, and its phases:
  double data_seconds = 0;       // next batch
  double forward_seconds = 0;    // ZeroGrads + Forward
  double backward_seconds = 0;   // Backward (+ gradient copies to the host)
  double optimizer_seconds = 0;  // clipping + optimizer (+ value copies back)
  // Time in collectives (expert all-to-alls, gradient all-reduces, loss and norm reductions),
  // taken out of the phases above, whose sum with it is `seconds`. 0 in one process.
  double communication_seconds = 0;
  // Per MoE layer, the token-slots routed to each expert in this step (over all ranks).
  std::vector<std::vector<int64_t>> expert_load;
  // With expert_store.dir: this rank's expert store over this step (expert_state_store.h).
  bool has_expert_store = false;
  uint64_t expert_cache_hits = 0;
  uint64_t expert_cache_misses = 0;  // store reads, on demand or prefetched
  uint64_t expert_prefetched = 0;
  uint64_t store_bytes_read = 0;
  uint64_t store_bytes_written = 0;
  double expert_wait_seconds = 0;         // waiting for experts' states (reads, write-backs)
  double store_read_seconds = 0;          // wall time with a store read in flight
  double store_read_exposed_seconds = 0;  // of it, time the trainer waited for an expert
  double store_write_seconds = 0;         // wall time with a write-back in flight
  double store_update_seconds = 0;        // the store's AdamW on the experts, with its waits
  double store_end_step_seconds = 0;      // waiting for the step's write-back at its end
  uint64_t prefetch_failed = 0;           // prefetch reads that failed (read again on demand)
  // The expert working set's weights and gradients at the step's end (0 when resident).
  uint64_t expert_working_set_bytes = 0;
  // Of them, the experts bound with a gradient only: activated by another replica, not this rank
  // (parallel.ep_size < world; Note [working set over ranks] in trainer.cc).
  uint64_t expert_replica_gradients = 0;
  // Per-task batches: the rows of each task in this step (kSyntheticTaskNames order), and the
  // rebalancing decision taken after it (elastic placement), for the log; "" when none.
  std::vector<int64_t> task_rows;
  std::string placement_change;
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
  // name the config key. `world` (optional, not owned) makes this trainer one rank of a
  // distributed run when it has more than one rank; Create is then collective over it, and so are
  // Step, Evaluate, SaveCheckpoint, LoadCheckpoint and BroadcastRootStatus. InvalidArgument when
  // parallel.ep_size does not divide the world or data.batch_size is not a multiple of it, or for
  // ep_size > 1 or zero_stage 3 in one process; FailedPrecondition from Zero3 for a model it cannot
  // shard; ResourceExhausted naming the key to lower when the sizes the config implies do not fit
  // in the memory available (training_memory.h), checked before the batches and the model are
  // built. `concurrent_mpi`: MPI runs at MPI_THREAD_MULTIPLE, so ZeRO-3 may prefetch the next
  // unit's all-gather on its own thread while this one runs the expert exchanges.
  static Result<std::unique_ptr<Trainer>> Create(const TrainConfig& config,
                                                 Communicator* world = nullptr,
                                                 bool concurrent_mpi = false);
  ~Trainer();

  // One optimizer step on the next train batch (recording its routing with log.routing_trace).
  // ResourceExhausted naming data.batch_size and data.seq_len when the step's memory cannot be
  // had.
  Result<StepReport> Step();
  // Loss and per-task accuracy on train.eval_batches held-out batches.
  Result<EvalReport> Evaluate();

  // Writes a checkpoint of the current state to `path` (atomically: a crash leaves either the old
  // file or the new one). Distributed: rank 0 writes; every rank returns rank 0's status.
  Status SaveCheckpoint(const std::string& path);
  // Restores the state saved at `path` (a checkpoint file, or a sharded checkpoint's directory:
  // storage/hdf5/checkpoint_set.h; either holds experts by global id, so any ep_size and world
  // size load it, each rank keeping the experts it owns). NotFound for a missing file, DataLoss
  // for a truncated or corrupt one, FailedPrecondition naming the differing key when it was
  // written for another model or data config. Distributed: rank 0 reads `path` (the other ranks'
  // `path` is ignored) and every rank returns its status.
  Status LoadCheckpoint(const std::string& path);

  // Every rank returns the `status` rank 0 passes in (collective), so a failure that rank 0 sees
  // (say, in writing a file only it writes) ends the operation on every rank. In one process:
  // `status`.
  Status BroadcastRootStatus(const Status& status);
  // Every rank returns the `value` rank 0 passes in (collective). In one process: `value`.
  Result<int64_t> BroadcastRootValue(int64_t value);

  int64_t step() const { return step_; }
  // Whether each step draws every task's batch apart (data.tasks.<task>.batch_size, or
  // train.placement per_task / elastic; runtime/data/task_batches.h).
  bool per_task_batches() const { return task_streams_ != nullptr; }
  // The current placement of the tasks on the ranks (task_placement.h); per-task batches only.
  const TaskPlacement& placement() const { return placement_; }
  // "placement elastic: copy: ranks 0,1 (4/4 rows); ...", or "" without per-task batches.
  std::string PlacementSummary() const;
  // Parameters of the whole model, and of its experts (over all ranks in a distributed run).
  int64_t num_parameters() const;
  int64_t num_expert_parameters() const;
  // ZeRO-3's memory report for this rank (parallel/zero3.h), or "" without parallel.zero_stage 3.
  std::string ShardingReport() const;
  // This rank and the number of ranks (0 and 1 in one process).
  int rank() const;
  int world_size() const;
  // Rank 0, which alone writes the run's files; true in one process.
  bool is_root() const { return rank() == 0; }
  const TrainConfig& config() const { return config_; }
  MoeModel& model() { return *model_; }
  // The routing recorded so far by this process (log.routing_trace).
  const storage::AccessTrace& routing_trace() const { return trace_; }
  const Dataset& dataset() const { return *dataset_; }
  // Every parameter's current fp32 value, in ParameterStore order (a host copy). Distributed: the
  // parameters this rank holds (the dense ones and its own experts). With an expert store in
  // exact mode, call ConsolidateExperts first (experts without tokens lag until then); with the
  // expert working set the experts are not held (their values are in the store).
  std::vector<std::vector<float>> ParameterValues();
  // Every parameter of the model, as the checkpoint holds them (names and shapes), in order.
  std::vector<std::pair<std::string, std::vector<int64_t>>> CheckpointParameters() const;
  // Non-null when the model holds only the experts a step activates (expert_store.dir on a host
  // backend: launcher/training/expert_working_set.h); null otherwise.
  const ExpertWorkingSet* expert_working_set() const { return working_set_.get(); }
  // With an expert store: replays every expert's missing updates and writes the cache back (see
  // ExpertStateStore::Consolidate); OK without one. Not collective.
  Status ConsolidateExperts();
  // This rank's expert store, or null without expert_store.dir.
  const ExpertStateStore* expert_store() const { return expert_store_.get(); }

 private:
  // One parameter of the whole model, as a single process registers it.
  struct ParamInfo {
    std::string name;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    bool is_expert = false;
    int expert = -1;
    int layer = -1;        // decoder layer (experts: for the working set)
    int expert_part = -1;  // experts: 0 w_gate, 1 w_up, 2 w_down
  };

  explicit Trainer(const TrainConfig& config);
  Status Init(Communicator* world, bool concurrent_mpi);
  Status InitParamStates();
  // Opens this rank's expert store over the expert states and hooks the MoE layers' experts.
  Status InitExpertStore();
  // The working set: the experts' entries of the checkpoint parameter list (all_params_), their
  // initial masters, and each bound MoE layer's weight source.
  Status InitExpertWorkingSet(ExpertStateStoreOptions options);
  // The MoE layer index of each decoder layer with experts (the same on every rank).
  std::map<int, int> MoeLayerIndex() const;
  // A checkpoint with this run's config, step, seed and data position, and no parameters.
  TrainCheckpoint CheckpointHeader();
  // Every gradient this step's clipping covers, in checkpoint parameter order: the states' and,
  // with the working set, its experts' (those not in it are zero and left out).
  std::vector<std::span<float>> ClippedGradients();
  // The working set's expert gradients in checkpoint parameter order, one entry per expert (its
  // parts); empty without one.
  std::vector<std::vector<std::span<float>>> WorkingSetGradients();
  // Replicas (parallel.ep_size < world): agrees with the rest of the expert-data-parallel group on
  // the experts any of them activated, and binds a zero gradient (BindGradient) to those this
  // rank did not (Note [working set over ranks]). Collective over the group; nothing without
  // replicas or without the working set.
  Status BindReplicaUnion();
  // Whether this rank holds global expert `expert` (always in one process).
  bool OwnsExpert(int expert) const;
  // The working set's checkpoint: every parameter streamed into `path` (experts one at a time
  // from the store), and restored from it likewise.
  Status SaveWorkingSetCheckpoint(const std::string& path);
  Status RestoreWorkingSetExperts(const std::string& path, const TrainCheckpoint& ckpt);
  // Step without the hint that Step adds to an out-of-memory error.
  Result<StepReport> StepOnce();
  // Per-task batches (trainer_tasks.cc): the streams and the first placement; this rank's rows
  // of the step with each row's loss weight and this rank's loss share; the end of a step (the
  // streams advance, the elastic window, a rebalancing decision every elastic.rebalance_every).
  Status InitTaskBatches();
  Status PlaceTasks();
  Status NextTaskBatch(std::vector<float>* row_weights, float* share);
  Status EndTaskStep(StepReport* report);
  Status Rebalance(StepReport* report);
  // Forward and Backward of this rank's batch (batch_, row_weights_) in train.micro_batches
  // pieces, the loss multiplied by `loss_scale` (f16); the step's loss, unscaled, in *loss, each
  // pass's time charged to its phase of `timer`, and the step's routing in step_expert_load_ (and
  // the trace).
  Status ForwardBackward(float loss_scale, LossReport* loss, StepTimer& timer);
  // Targets != -1 of a host i32 tensor.
  static int64_t CountTargets(const Tensor& targets);
  // Appends the routing of the last Forward's first log.routing_trace_tokens tokens (of its
  // `tokens`) to trace_.
  void RecordRouting(int64_t tokens);
  // SaveCheckpoint once the expert states are in states_ (one process).
  Status SaveCheckpointOfStates(const std::string& path);
  // The distributed save (collective): rank 0 streams the file, each expert tensor sent by its
  // owner as the writer reaches it. `consolidated` is this rank's expert store consolidation;
  // a failed one still takes part and is returned.
  Status SaveDistributedCheckpoint(const std::string& path, Status consolidated);
  // The last expert whose store state OwnExpertState read, with its parts' moments (taken as
  // its parts are).
  struct ExportedExpert {
    size_t entry = SIZE_MAX;
    std::vector<std::vector<float>> values, m, v;  // values: the working set's (from the store)
    int64_t opt_step = 0;
  };
  // The checkpoint state of all_params_[i], an expert this rank holds: value, m and v (empty
  // where the optimizer keeps none) and step count, from states_ or the expert store (the
  // working set's: all of them from the store, each expert read once for its parts, which are
  // asked for in checkpoint order).
  Status OwnExpertState(size_t i, ExportedExpert* exported, CheckpointParam* out);
  // An owner in the first EP group other than rank 0: sends rank 0 the state of each expert
  // tensor it owns, in checkpoint order (after a failure, `failed` or its own, only the failure
  // headers). Returns the first failure, or the transport's.
  Status SendOwnExpertStates(Communicator& world, Status failed);
  // Rank 0: the state of expert all_params_[i] from its owner into `out`; `sent` is the owner's
  // failure when it had none to send. Errors are the transport's.
  Status ReceiveExpertState(Communicator& world, size_t i, CheckpointParam* out, Status* sent);
  // Rank 0 (or the one process): reads `path`'s header, step counts and parameters, leaving the
  // experts unread where they follow one at a time (the working set, a distributed run).
  Status LoadCheckpointOnRoot(const std::string& path, TrainCheckpoint* ckpt);
  // Distributed load (collective): every expert tensor of `reader` (rank 0's; null elsewhere) into
  // `ckpt` on the ranks that hold the expert, one tensor at a time from rank 0. Every rank returns
  // rank 0's read status.
  Status DistributeExperts(Communicator& world, const TrainCheckpointReader* reader,
                           TrainCheckpoint* ckpt);
  // Copies `ckpt` (every parameter of the model, in ParameterStore order) into this trainer.
  Status RestoreState(TrainCheckpoint& ckpt);
  // Says (in the log) when `saved_json`, the config of the checkpoint at `path`, trained in
  // another train.precision than this run: allowed, the masters are f32 in every precision.
  void NoteResumedPrecision(const std::string& path, const std::string& saved_json) const;
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
  // One process on a GPU with Adam/AdamW: the optimizer steps on the device (null otherwise).
  std::unique_ptr<DeviceAdam> device_adam_;
  std::unique_ptr<LrSchedule> schedule_;
  // The parameters this rank steps, in ParameterStore order: distributed, its own experts and
  // (without ZeRO-3, which keeps its own) the dense ones.
  std::vector<ParamState> states_;
  // Every parameter of the model in ParameterStore order, recorded at creation: the checkpoint's
  // contents (a distributed rank holds only its own experts).
  std::vector<ParamInfo> all_params_;
  Batch batch_;
  std::vector<float> row_weights_;  // per-task batches: each row's loss weight (empty otherwise)
  int64_t step_ = 0;
  int64_t skipped_steps_ = 0;   // in this run
  storage::AccessTrace trace_;  // with log.routing_trace
  // The routing of the step's micro-batches so far: per MoE layer, token-slots per expert.
  std::vector<std::vector<int64_t>> step_expert_load_;
  // train.precision f16: the dynamic loss scale (empty otherwise).
  std::optional<DynamicLossScaler> loss_scaler_;
  // Per-task batches: the streams (null: one mixed batch per step from train_batcher_), where
  // the tasks are, and the elastic planner's cost model and measurement window.
  std::unique_ptr<TaskStreams> task_streams_;
  TaskPlacement placement_;
  CostModel cost_;
  RankSample window_;  // sums over window_steps_ steps
  int64_t window_steps_ = 0;
  std::unique_ptr<DistributedRank> dist_;  // null in one process
  // With expert_store.dir (the file system outlives the store).
  // This rank's lock on expert_store.dir ("rank-<r>.lock"), taken before its store is touched.
  std::unique_ptr<DirectoryLock> store_lock_;
  std::unique_ptr<storage::FileSystem> store_fs_;
  std::unique_ptr<ExpertStateStore> expert_store_;
  std::unique_ptr<ExpertWorkingSet> working_set_;  // borrows expert_store_
  // Parameter name -> its index in states_ (the parameters this rank holds).
  std::unordered_map<std::string, size_t> state_of_;
};

}  // namespace sy::launcher
