// DistributedRank: this process's part of a distributed training run (a world of W > 1 ranks,
// `mpirun -np W switchyard train`; docs/parallel.md), and the collectives the trainer's step
// needs. The Trainer holds one when its world has more than one rank, and none in one process.
//
// Layout. Every rank is a data-parallel rank with its rows of the global batch (the Trainer's
// batcher shard). The experts of each MoE layer are partitioned over EP groups of
// parallel.ep_size consecutive ranks (parallel/expert_parallel_compute.h, flat or hierarchical
// all-to-all) and replicated over the W / ep_size groups. The rest of the model is replicated on
// every rank (parallel.zero_stage 0), or sharded over the world by ZeRO-3 (zero_stage 3,
// parallel/zero3.h: gathered unit by unit through the model's layer hooks, the optimizer on each
// rank's shards). With parallel.embedding_partition each rank holds hidden_size / W columns of
// the token embedding (parallel/embedding_partition.h).
//
// Equivalence to one process. Each rank's loss enters with its share of the global targets,
// n_r / N (ShareLoss, loss_share_expert_compute.h). After Backward the dense gradients are summed
// over the world (ZeRO-3: reduce-scattered into the shards during the backward) and the expert
// gradients over the ranks holding the same experts (ReduceGradients). So the logged loss, the
// gradients, the gradient norm (each expert counted once) and the update equal those of one
// process on the global batch, up to floating-point rounding, as long as the router's batch
// statistics do not matter: capacity_factor 0 (dropless) and no aux/z loss.
//
// Every collective runs on a timed duplicate of the caller's world (timed_communicator.h), so
// communication_seconds() is the time this rank's thread spent communicating.
//
// Bound experts. A model built with ModelOptions::bound_experts (training on the expert store's
// working set, launcher/training/expert_working_set.h) gets bound local experts: experts() stays
// empty and the trainer passes the activated experts' gradients to ReduceGradients. With replicas
// (parallel.ep_size < world) each replica passes the union of the experts its group activated
// (SumOverReplicas), those it did not compute with zero gradients, and beyond two replicas the
// sums go expert by expert (Note [working set over ranks] in trainer.cc).
//
// Ownership: owns its communicators, topology, this rank's experts and ZeRO-3. It does not own
// the backend, the thread pool or the model, which must outlive it, nor the caller's world. The
// model's expert layers (installed by AttachModel) point into this object's topology and
// communicators, so the model must be destroyed first, after DetachModel.
// Thread-safety: none; the trainer's thread drives it (ZeRO-3 may prefetch on its own thread,
// see parallel/zero3.h). Every call but the accessors is collective over the world.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "launcher/training/loss_share_expert_compute.h"
#include "launcher/training/param_state.h"
#include "launcher/training/timed_communicator.h"
#include "launcher/training/train_options.h"
#include "parallel/communicator.h"
#include "parallel/embedding_partition.h"
#include "parallel/expert_parallel_compute.h"
#include "parallel/topology.h"
#include "parallel/zero3.h"
#include "runtime/backend/backend.h"
#include "runtime/core/thread_pool.h"
#include "runtime/model/moe_model.h"

namespace sy::launcher {

// A step's loss over the whole world, and the gradient norm of the whole model before clipping.
struct GlobalStepLoss {
  float loss = 0;
  float ce_loss = 0;
  float aux_loss = 0;
  float grad_norm = 0;
};

class DistributedRank {
 public:
  // Validates the "parallel" block against the world and makes the communicators: a timed
  // duplicate of `world`, the EP and expert-data-parallel groups, the EP topology. Collective.
  // InvalidArgument naming the key when parallel.ep_size or parallel.ranks_per_node does not
  // divide the world, when the two do not divide one another, or when
  // parallel.embedding_partition is set and model.hidden_size is not a multiple of the world.
  static Result<std::unique_ptr<DistributedRank>> Create(const TrainConfig& config,
                                                         Communicator& world, Backend& backend,
                                                         ThreadPool* pool);
  ~DistributedRank();
  DistributedRank(const DistributedRank&) = delete;
  DistributedRank& operator=(const DistributedRank&) = delete;

  // Distributes `model` (initialised from train.seed on every rank alike): replaces each MoE
  // layer's expert compute with an expert-parallel one over this rank's experts (initialised to
  // the same values, and dropped from the model's own store), partitions the embedding with
  // parallel.embedding_partition, and shards the dense state with parallel.zero_stage 3 (its
  // all-gathers prefetched on their own thread when `concurrent_mpi`: MPI_THREAD_MULTIPLE).
  // FailedPrecondition from Zero3 for a model it cannot shard. Once per object.
  Status AttachModel(MoeModel& model, const TrainConfig& config, bool concurrent_mpi);
  // Removes ZeRO-3's hooks from the model; call before destroying the model.
  void DetachModel();

  // The step, in order:
  // Zeroes the gradients: ZeRO-3's shards or the model's, and this rank's experts'.
  void ZeroGrads();
  // Before Backward: this rank's share n_r / N of the world's `local_targets`, set on the expert
  // layers, ZeRO-3 and the embedding partition, whose gradients carry it.
  Result<float> ShareLoss(int64_t local_targets);
  // As ShareLoss with the share given (per-task batches compute it with their own reduction).
  // Not collective.
  void SetLossShare(float share);
  // After Backward (the gradients in `states`, this rank's, on the host): scales the dense
  // gradients by `share` and sums them over the world, sums the expert gradients over their
  // replicas, reduces the loss terms and the squared gradient norm of the whole model, and clips
  // every gradient (ZeRO-3's shards too) to `grad_clip` when it is > 0, unscaling them by
  // `inv_loss_scale` in the same multiplication, as UnscaleAndClipGradNorm does (the returned norm
  // is the unscaled one).
  // `bound_experts`: per bound expert of this rank (the expert store's working set), its parts'
  // gradients, in parameter order; taken as expert gradients before those in `states`. The
  // experts left out have zero gradients on every replica, so they count nothing. With replicas
  // every rank of the expert-data-parallel group must pass the same experts (SumOverReplicas).
  // Beyond two replicas each expert's gradient is summed by an all-reduce of its own (two: one
  // packed call, a + b in any order), so the sums are the same bits whichever experts are passed.
  Result<GlobalStepLoss> ReduceGradients(
      std::span<ParamState> states, std::span<const std::vector<std::span<float>>> bound_experts,
      const LossReport& local, float share, double grad_clip, float inv_loss_scale = 1.0f);
  // Sums `counts` elementwise over this rank's expert-data-parallel group (the ranks holding the
  // same experts); nothing to do without replicas (ep_size == world).
  Status SumOverReplicas(std::span<int64_t> counts);
  // Sums `load` (per MoE layer, per expert: this rank's routed token-slots) over the world.
  Status SumOverWorld(std::vector<std::vector<int64_t>>& load);

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  // The timed world, and this rank's EP group (world ranks [g * ep_size, (g + 1) * ep_size)).
  Communicator& world() { return *world_; }
  Communicator& ep_group() { return *groups_.ep; }
  int ep_size() const { return ep_size_; }
  int experts_per_rank() const { return experts_per_rank_; }
  // This rank's experts, under their global ids (the model's own copies are dropped).
  ParameterStore& experts() { return experts_; }
  // ZeRO-3 (parallel.zero_stage 3), or null.
  Zero3* zero() { return zero_.get(); }
  // Seconds this rank's thread has spent in collectives so far.
  double communication_seconds() const { return clock_->seconds; }
  // ZeRO-3's memory report for this rank (parallel/zero3.h), or "" without parallel.zero_stage 3.
  std::string ShardingReport() const;

 private:
  DistributedRank(Backend& backend, ThreadPool* pool) : backend_(backend), pool_(pool) {}

  Backend& backend_;
  ThreadPool* pool_;
  MoeModel* model_ = nullptr;  // AttachModel's
  bool concurrent_mpi_ = false;
  std::shared_ptr<CommunicationClock> clock_ = std::make_shared<CommunicationClock>();
  std::unique_ptr<Communicator> world_;  // a timed duplicate of the caller's world
  ExpertParallelGroups groups_;          // EP group and expert-DP group, timed
  std::unique_ptr<Topology> ep_topology_;
  // MoeModel builds every expert before the layers' expert compute is replaced; AttachModel drops
  // those copies from the model's store (their names stay, with undefined tensors), so the
  // checkpoint takes the experts from here.
  ParameterStore experts_;
  std::vector<LossShareExpertCompute*> layers_;  // per MoE layer, owned by the layer
  std::unique_ptr<Zero3> zero_;
  // The token embedding table partitioned by columns over the world (owned by the model). Its
  // Parameter is a column shard, stepped like a dense one but not all-reduced.
  EmbeddingPartition* embedding_ = nullptr;
  int ep_size_ = 1;
  int experts_per_rank_ = 0;
};

}  // namespace sy::launcher
