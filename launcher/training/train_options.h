// TrainConfig: every block of a `switchyard train` config, bound from one JSON file plus its
// `--set` overrides.
//
//   {
//     "model": {...ModelConfig fields...},          // runtime/model/model_config.h
//     "data": {...},                                // runtime/data/data_options.h
//     "train": {"device": "cpu", "steps": 300, "seed": 1, "grad_clip": 1.0,
//               "eval_every": 100, "eval_batches": 4, "threads": 0, "placement": "uniform",
//               "precision": "f32", "micro_batches": 1, "wait_for_lock": false},
//     "loss_scaler": {"init_scale": 65536, "growth_factor": 2, "backoff_factor": 0.5,
//                     "growth_interval": 2000},       // train.precision f16 only
//     "elastic": {"rebalance_every": 0, "min_gain": 0.05},
//     "optim": {"kind": "adamw", "lr": 3e-3, "min_lr": 0, "warmup_steps": 20,
//               "schedule": "cosine", "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
//               "weight_decay": 0.0},
//     "checkpoint": {"dir": "", "every": 0, "resume": false, "resume_from": "", "keep": 0},
//     "log": {"metrics": "", "every": 10, "progress": "auto", "routing_trace": "",
//             "routing_trace_tokens": 16},
//     "parallel": {"ep_size": 1, "zero_stage": 0, "hierarchical_a2a": false,
//                  "ranks_per_node": 0, "timeout_s": 300, "embedding_partition": false},
//     "expert_store": {"dir": "", "filesystem": "uring", "cache_mib": 256, "lfu_threshold": 0,
//                      "decay": 0.5, "decay_every": 25, "prefetch": true, "staging_mib": -1,
//                      "sparse_adam": false}
//   }
//
// The "parallel" block only matters under mpirun (launcher/training/trainer.h): checks that need
// the world size (world % ep_size) happen when the trainer is created, so a checkpoint written by a
// distributed run still loads, config and all, in one process.
//
// Ownership: value types. Thread-safety: the schema functions return immutable statics and are
// safe from any thread; LoadTrainConfig mutates the Config it is given (one thread).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_options.h"
#include "runtime/config/config.h"
#include "runtime/config/config_schema.h"
#include "runtime/data/data_options.h"
#include "runtime/model/model_config.h"

namespace sy::launcher {

// Which ranks compute which rows of a step (launcher/training/task_placement.h).
enum class Placement : uint8_t {
  kUniform,  // every rank takes an equal share of the step's rows (of every task's batch)
  kPerTask,  // one task per group of world / tasks consecutive ranks, in config order
  kElastic,  // the planner's: heavy tasks over several ranks, light ones merged, rebalanced
};

// What a training step computes in (docs/training.md, "Precision"). In every precision the
// master weights, the optimizer's moments and the gradients the optimizer reads are f32; bf16 and
// f16 hold the compute copy of the weights and the activations in 16 bits (Note [mixed precision]
// in runtime/model/moe_model.h). f16 scales the loss dynamically (the loss_scaler block).
enum class Precision : uint8_t { kF32, kBF16, kF16 };
// f32, bf16 or f16: the dtype of the compute copy and the activations.
DType ComputeDType(Precision precision);
// "f32", "bf16", "f16".
std::string_view PrecisionName(Precision precision);

// The "train" block.
struct TrainOptions {
  std::string device = "cpu";  // Default: cpu. cpu | sim (| cuda:N when built)
  int64_t steps = 100;         // Default: 100 optimizer steps in all (a resumed run included)
  uint64_t seed = 1;           // Default: 1. Seeds the parameter initialisation
  double init_stddev = 0.02;   // Default: 0.02. Stddev of the initial weight matrices
  double grad_clip = 1.0;      // Default: 1.0. Global L2 gradient-norm limit; 0 disables
  int64_t eval_every = 0;      // Default: 0 = evaluate only at the end (steps)
  int64_t eval_batches = 4;    // Default: 4 batches of the held-out split per evaluation
  int threads = 0;             // Default: 0 = SY_NUM_THREADS or every core
  // Default: uniform. Which ranks compute which rows; per_task and elastic draw each task's
  // batch apart (data.tasks.<task>.batch_size) and need the synthetic tasks.
  Placement placement = Placement::kUniform;
  // Default: 0 = not modelled. On the sim device, the modelled compute rate (GFLOP/s): each step
  // also takes 6 x active parameters per token x this rank's tokens / rate (Backend::ModelCompute),
  // so that ranks oversubscribed on few cores time the schedule, not their contention.
  double sim_gflops = 0;
  // On the sim device, its host <-> device link: bandwidth (GB/s each way) and latency per copy
  // (us). Default: 0 = the backend's (SimOptions: 25 GB/s, 10 us).
  double sim_link_gbps = 0;
  double sim_link_latency_us = 0;
  // Default: f32. f32, bf16 or f16 (Precision).
  Precision precision = Precision::kF32;
  // Default: 1. Each step's batch on a rank is cut into this many micro-batches of equal rows,
  // run forward and backward one after the other with their gradients summed in f32 before one
  // clipping and update, so that a step's batch need not fit in memory at once. The
  // cross-entropy is the step's mean over all its targets, exactly; the router's auxiliary and z
  // losses are each micro-batch's, averaged (as Megatron-LM does). Must divide this rank's rows
  // (data.batch_size / ranks).
  int64_t micro_batches = 1;
  // Default: false. When another run holds checkpoint.dir or this rank's expert store
  // (launcher/training/directory_lock.h), wait for it to end, saying so, instead of failing at
  // once. `switchyard train --wait-for-lock`.
  bool wait_for_lock = false;
};

// The "elastic" block: live rebalancing under train.placement elastic
// (launcher/training/elastic_planner.h).
struct ElasticOptions {
  // Default: 0 = never. Steps between rebalancing decisions: each rank's measured compute and
  // wait times over the last window calibrate the cost model, and the planner proposes a
  // placement.
  int64_t rebalance_every = 0;
  // Default: 0.05. The predicted step-time gain (1 - new / current) a new placement must exceed
  // to be adopted.
  double min_gain = 0.05;
};

// The "optim" block: the optimizer math and the learning-rate schedule.
struct OptimBlock {
  OptimizerKind kind = OptimizerKind::kAdamW;               // Default: adamw
  double lr = 3e-4;                                         // Default: 3e-4 peak learning rate
  double min_lr = 0.0;                                      // Default: 0. End of the decay
  int64_t warmup_steps = 0;                                 // Default: 0 steps
  LrScheduleKind schedule = LrScheduleKind::kWarmupCosine;  // Default: cosine (to train.steps)
  double beta1 = 0.9;                                       // Default: 0.9
  double beta2 = 0.999;                                     // Default: 0.999
  double eps = 1e-8;                                        // Default: 1e-8
  double weight_decay = 0.0;                                // Default: 0 (decoupled for adamw)
  double momentum = 0.0;                                    // Default: 0 (sgd only)
};

// The "checkpoint" block.
struct CheckpointOptions {
  std::string dir;      // Default: none = no checkpoints. Directory of step-NNNNNNNN.h5 files
  int64_t every = 0;    // Default: 0 = only at the end (steps between checkpoints)
  bool resume = false;  // Default: false. Continue from the newest checkpoint in dir that verifies
  // Default: none. Continue from this checkpoint file (implies resume; `--resume-from FILE`).
  std::string resume_from;
  int keep = 0;  // Default: 0 = keep all. Newest checkpoints to keep
};

// How progress is shown on stdout.
enum class ProgressStyle : uint8_t {
  kAuto,   // a bar rewritten with \r on a TTY, plain lines otherwise
  kBar,    // always the bar
  kLines,  // always plain lines
  kNone,   // nothing but the final summary
};

// The "log" block.
struct LogOptions {
  std::string metrics;                            // Default: none. JSON-lines metrics file
  int64_t every = 10;                             // Default: 10. Steps between plain progress lines
  ProgressStyle progress = ProgressStyle::kAuto;  // Default: auto
  // Routing trace (storage/cache/access_trace.h format) written at the end of the run: the first
  // routing_trace_tokens tokens of every train batch, each one trace step with the experts every
  // MoE layer routed it to. Default: none.
  std::string routing_trace;
  int64_t routing_trace_tokens = 16;  // Default: 16
};

// The "parallel" block: how `mpirun -np W switchyard train` splits the work (docs/parallel.md).
// Every rank is a data-parallel rank of the dense parameters; the experts of each MoE layer are
// partitioned over EP groups of ep_size consecutive ranks and replicated over the W / ep_size
// groups.
struct ParallelOptions {
  int ep_size = 1;     // Default: 1. Ranks per expert-parallel group; divides W and num_experts
  int zero_stage = 0;  // Default: 0 (replicated dense state). 0 or 3 (ZeRO-3 sharding)
  bool hierarchical_a2a = false;  // Default: false. Two-level (intra, inter-node) all-to-all
  // Default: 0 = the real nodes (ranks that share memory). N > 0 emulates nodes of N consecutive
  // ranks, so the hierarchical paths can run on one machine.
  int ranks_per_node = 0;
  // Default: 300 s. How long a rank waits in a collective for its peers before it aborts the job
  // (a peer that died or hangs); 0 waits forever.
  double timeout_s = 300;
  // Default: false. Partition the token embedding table by columns over the W data-parallel
  // ranks (MoESys IV-C; parallel/embedding_partition.h): each rank holds hidden_size / W columns
  // and their optimizer state, and its gradient needs no all-reduce. Needs untied embeddings
  // (model.tie_word_embeddings false), hidden_size % W == 0 (checked when the trainer starts) and
  // zero_stage 0. No effect in one process.
  bool embedding_partition = false;
};

// Which file system the expert store does its I/O through (storage/fs/file_system.h).
enum class StoreFileSystem : uint8_t {
  kUring,  // io_uring with O_DIRECT; posix, with a logged reason, where it cannot run
  kPmem,   // libpmem2 (page granularity on any file); posix where the build lacks it
  kPosix,  // pread / pwrite with O_DIRECT
};
// The name MakeFileSystem takes: "io_uring", "pmem" or "posix".
std::string_view StoreFileSystemName(StoreFileSystem fs);

// The "expert_store" block: the expert (sparse) optimizer states on SSD/PMem behind the MoESys LFU
// CPU cache (launcher/training/expert_state_store.h, docs/training.md). With `dir` empty the
// states live in memory, as without the block.
struct ExpertStoreOptions {
  // Default: none = expert states in memory. Directory of the stores, one file per rank
  // (rank-R.store), keyed by (MoE layer, expert).
  std::string dir;
  StoreFileSystem filesystem = StoreFileSystem::kUring;  // Default: uring
  double cache_mib = 256;  // Default: 256 MiB. CPU cache budget for expert states, per rank
  // Default: 0. MoESys Algorithm 2's threshold: on a miss when full the entry with the smallest
  // count at or above it is evicted (the smallest of all when none reaches it).
  double lfu_threshold = 0;
  double decay = 0.5;        // Default: 0.5. Counts are multiplied by this every decay_every steps
  int64_t decay_every = 25;  // Default: 25 steps between decays; 0 never decays
  // Default: true. Start reading the next needed expert from the store while the current one is
  // updated (one ahead, so that a prefetched entry is never the victim of the next).
  bool prefetch = true;
  // Default: -1 = half of cache_mib. MiB of cache_mib, per rank, given to the optimizer states of
  // experts not cached, read during the forward and backward (with prefetch, the working set and
  // a crc32c store: launcher/training/expert_state_store.h); 0: none. Below cache_mib.
  double staging_mib = -1;
  // Default: false (exact): an expert that got no tokens in a step has its zero-gradient AdamW
  // step (moment decay, weight decay) replayed when it is next loaded, at a checkpoint and at the
  // end, so training is bit-identical to in-memory training. true skips those steps, as MoESys
  // does: an expert's moments and step count advance only when it is activated.
  bool sparse_adam = false;

  bool enabled() const { return !dir.empty(); }
  double StagingMib() const { return staging_mib < 0 ? cache_mib / 2 : staging_mib; }
};

struct TrainConfig {
  ModelConfig model;
  DataOptions data;
  TrainOptions train;
  OptimBlock optim;
  CheckpointOptions checkpoint;
  LogOptions log;
  ParallelOptions parallel;
  ExpertStoreOptions expert_store;
  ElasticOptions elastic;
  LossScalerOptions loss_scaler;  // train.precision f16 only
  // The effective config (every block with its defaults), as written into checkpoints.
  std::string effective_json;

  OptimizerOptions optimizer_options() const;
  LrScheduleOptions schedule_options() const;
};

const ConfigSchema<ModelConfig>& ModelConfigSchema();
const ConfigSchema<TrainOptions>& TrainOptionsSchema();
const ConfigSchema<OptimBlock>& OptimBlockSchema();
const ConfigSchema<CheckpointOptions>& CheckpointOptionsSchema();
const ConfigSchema<LogOptions>& LogOptionsSchema();
const ConfigSchema<ParallelOptions>& ParallelOptionsSchema();
const ConfigSchema<ExpertStoreOptions>& ExpertStoreOptionsSchema();
const ConfigSchema<ElasticOptions>& ElasticOptionsSchema();
const ConfigSchema<LossScalerOptions>& LossScalerOptionsSchema();

// Binds every block of `config` (rejecting unknown blocks with a suggestion), validates the model,
// checks the model against the data (vocabulary) and parallel.ep_size against model.num_experts.
// Errors name the config file and the key.
Result<TrainConfig> LoadTrainConfig(Config& config);

// Config::Load(path), the overrides, then LoadTrainConfig.
Result<TrainConfig> LoadTrainConfigFile(const std::string& path,
                                        const std::vector<std::string>& overrides);
// The same from the config's JSON text; `source` names it in errors.
Result<TrainConfig> LoadTrainConfigText(std::string_view text, const std::string& source,
                                        const std::vector<std::string>& overrides);

}  // namespace sy::launcher
