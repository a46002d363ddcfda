#include "launcher/training/distributed_rank.h"

#include <cmath>
#include <string>
#include <utility>

#include "launcher/training/rank_collectives.h"
#include "optim/grad_clip.h"

namespace sy::launcher {
namespace {

double Squared(float norm) { return static_cast<double>(norm) * static_cast<double>(norm); }

}  // namespace

Result<std::unique_ptr<DistributedRank>> DistributedRank::Create(const TrainConfig& config,
                                                                 Communicator& world,
                                                                 Backend& backend,
                                                                 ThreadPool* pool) {
  const ParallelOptions& par = config.parallel;
  const int w = world.size();
  if (w % par.ep_size != 0) {
    return InvalidArgumentError("config: 'parallel.ep_size' " + std::to_string(par.ep_size) +
                                " does not divide the world of " + std::to_string(w) +
                                " ranks; run mpirun -np N with N a multiple of it");
  }
  if (par.ranks_per_node > 0 && w % par.ranks_per_node != 0) {
    return InvalidArgumentError("config: 'parallel.ranks_per_node' " +
                                std::to_string(par.ranks_per_node) +
                                " does not divide the world of " + std::to_string(w) + " ranks");
  }
  // EP groups are consecutive ranks, so with emulated nodes of N consecutive ranks an EP group
  // either spans whole nodes (N divides ep_size) or lies inside one (ep_size divides N).
  TopologyOptions topology_options;
  if (par.ranks_per_node > 0) {
    if (par.ep_size % par.ranks_per_node == 0) {
      topology_options.ranks_per_node = par.ranks_per_node;
    } else if (par.ranks_per_node % par.ep_size == 0) {
      topology_options.ranks_per_node = par.ep_size;
    } else {
      return InvalidArgumentError(
          "config: 'parallel.ranks_per_node' " + std::to_string(par.ranks_per_node) +
          " and 'parallel.ep_size' " + std::to_string(par.ep_size) +
          " must divide one another (an EP group of consecutive ranks spans whole nodes or lies "
          "in one)");
    }
  }
  const int64_t hidden = config.model.hidden_size;
  if (par.embedding_partition && hidden % w != 0) {
    return InvalidArgumentError(
        "config: 'parallel.embedding_partition' splits the embedding columns over the " +
        std::to_string(w) + " ranks, but 'model.hidden_size' " + std::to_string(hidden) +
        " is not a multiple of " + std::to_string(w) +
        "; choose another world size or set parallel.embedding_partition=false");
  }
  std::unique_ptr<DistributedRank> rank(new DistributedRank(backend, pool));
  rank->ep_size_ = par.ep_size;
  // A duplicate of the world, timed, so the step can report its communication time.
  SY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> dup, world.Split(0, world.rank()));
  rank->world_ = std::make_unique<TimedCommunicator>(std::move(dup), rank->clock_);
  SY_ASSIGN_OR_RETURN(rank->groups_, MakeExpertParallelGroups(*rank->world_, par.ep_size));
  SY_ASSIGN_OR_RETURN(rank->ep_topology_, Topology::Create(*rank->groups_.ep, topology_options));
  return rank;
}

DistributedRank::~DistributedRank() = default;

Status DistributedRank::AttachModel(MoeModel& model, const TrainConfig& config,
                                    bool concurrent_mpi) {
  SY_CHECK(model_ == nullptr) << "DistributedRank::AttachModel called twice";
  model_ = &model;
  concurrent_mpi_ = concurrent_mpi;
  const ModelConfig& model_config = config.model;
  const ParallelOptions& par = config.parallel;
  if (model_config.num_experts > 0) {
    experts_per_rank_ = model_config.num_experts / par.ep_size;
    // A model built with bound experts (the expert store's working set) gets bound local experts
    // too: nothing is registered in experts_, the trainer's working set gives the weights.
    const bool bound = model.options().bound_experts;
    const ExpertComputeFactory factory = ExpertParallelCompute::Factory(
        *ep_topology_, model_config,
        par.hierarchical_a2a ? AllToAllAlgorithm::kHierarchical : AllToAllAlgorithm::kFlat, bound);
    int m = 0;
    for (int l = 0; l < model_config.num_layers; ++l) {
      if (!model_config.IsMoeLayer(l)) continue;
      // In the model's weight dtype: the compute copy in mixed precision (the masters are the
      // trainer's), the f32 weights otherwise.
      SY_ASSIGN_OR_RETURN(
          std::unique_ptr<ExpertCompute> experts,
          factory(backend_, experts_, l, model.options().weight_dtype, /*with_grad=*/true));
      auto shared = std::make_unique<LossShareExpertCompute>(std::move(experts));
      layers_.push_back(shared.get());
      model.moe_layer(m++).set_expert_compute(std::move(shared));
    }
    // Same (seed, name) -> values as the model's copies of these experts.
    SY_RETURN_IF_ERROR(experts_.Initialize(backend_, config.train.seed,
                                           static_cast<float>(config.train.init_stddev)));
    // The model registered every expert before its expert compute was replaced, and nothing
    // computes with those copies now: drop them, so a rank holds only its own experts' memory.
    for (Parameter& p : model.parameters()) {
      if (!p.is_expert) continue;
      p.value = Tensor();
      p.grad = Tensor();
    }
  }
  if (par.embedding_partition) {
    // Every rank initialised the whole table from the same seed; each keeps its columns.
    SY_ASSIGN_OR_RETURN(embedding_, InstallEmbeddingPartition(model, *world_));
  }
  if (par.zero_stage == 3) {
    Zero3Options zero_options;
    zero_options.optimizer = config.optimizer_options();
    // The expert layers call MPI from this thread during Forward and Backward; a prefetching
    // ZeRO-3 thread calls it at the same time (on its own communicator), which needs
    // MPI_THREAD_MULTIPLE (training_job.cc asks for it; Open MPI provides it).
    zero_options.prefetch = concurrent_mpi;
    SY_ASSIGN_OR_RETURN(zero_, Zero3::Create(model, *world_, zero_options, pool_));
  }
  return Status::Ok();
}

void DistributedRank::DetachModel() { zero_.reset(); }

void DistributedRank::ZeroGrads() {
  if (zero_) {
    zero_->ZeroGrads();  // not the model's: that would commit every released page
  } else {
    model_->ZeroGrads();
  }
  experts_.ZeroGrads(backend_);
}

Result<float> DistributedRank::ShareLoss(int64_t local_targets) {
  int64_t targets = local_targets;
  SY_RETURN_IF_ERROR(
      world_->AllReduceInPlace<int64_t>(std::span<int64_t>(&targets, 1), Reduction::kSum));
  const float share =
      targets > 0
          ? static_cast<float>(static_cast<double>(local_targets) / static_cast<double>(targets))
          : 0.0f;
  SetLossShare(share);
  return share;
}

void DistributedRank::SetLossShare(float share) {
  for (LossShareExpertCompute* layer : layers_) layer->set_share(share);
  if (zero_) zero_->set_gradient_prescale(share);
  // The embedding's gradient slices carry each rank's share as they are exchanged.
  if (embedding_) embedding_->set_gradient_prescale(share);
}

Result<GlobalStepLoss> DistributedRank::ReduceGradients(
    std::span<ParamState> states, std::span<const std::vector<std::span<float>>> bound_experts,
    const LossReport& local, float share, double grad_clip, float inv_loss_scale) {
  std::vector<std::span<float>> dense, shards;
  // Per expert its parts' gradients: the bound ones, then those of `states` (an expert's parts
  // are consecutive there, in parameter order).
  std::vector<std::vector<std::span<float>>> by_expert(bound_experts.begin(), bound_experts.end());
  const Parameter* last_expert = nullptr;
  for (ParamState& s : states) {
    std::span<float> g(s.host_grad.data<float>(), static_cast<size_t>(s.host_grad.numel()));
    if (s.param->is_column_shard()) {
      shards.push_back(g);  // complete on its owner (EmbeddingPartition::Backward)
    } else if (!s.param->is_expert) {
      dense.push_back(g);
    } else {
      if (last_expert == nullptr || last_expert->layer != s.param->layer ||
          last_expert->expert != s.param->expert) {
        by_expert.emplace_back();
      }
      by_expert.back().push_back(g);
      last_expert = s.param;
    }
  }
  std::vector<std::span<float>> experts;
  for (const std::vector<std::span<float>>& parts : by_expert) {
    experts.insert(experts.end(), parts.begin(), parts.end());
  }
  // The experts' gradients already carry each rank's share (LossShareExpertCompute); the dense
  // ones get it here, then each is summed over the ranks that hold it. Under ZeRO-3 the dense
  // gradients were prescaled and reduce-scattered into their shards during the backward.
  if (!zero_) {
    if (share != 1.0f) ScaleGrads(dense, share, pool_);
    SY_RETURN_IF_ERROR(AllReduceSpans(*world_, dense));
  }
  // One all-reduce per expert, so that its sums do not depend on which other experts are
  // reduced: the working set passes only the experts its replicas activated, the resident path
  // every one (Note [working set over ranks] in trainer.cc). Two replicas add two terms, a + b,
  // the same bits in either order, whatever the packing: one call then.
  if (groups_.expert_dp->size() <= 2) {
    SY_RETURN_IF_ERROR(AllReduceSpans(*groups_.expert_dp, experts));
  } else {
    SY_RETURN_IF_ERROR(AllReduceEach(*groups_.expert_dp, by_expert));
  }
  // The loss terms weighted by the shares, the experts' squared norm and the dense shards'
  // squared norm (ZeRO-3), and the embedding column slices' squared norm, summed over the world.
  // Each expert lives on world / ep_size ranks, so that sum counts it that many times; each
  // embedding column lives on one rank.
  double sums[6] = {share * static_cast<double>(local.loss),
                    share * static_cast<double>(local.ce_loss),
                    share * static_cast<double>(local.aux_loss),
                    Squared(GlobalGradNorm(experts, pool_)),
                    zero_ ? zero_->LocalGradSquaredNorm() : 0.0,
                    shards.empty() ? 0.0 : Squared(GlobalGradNorm(shards, pool_))};
  SY_RETURN_IF_ERROR(world_->AllReduceInPlace<double>(sums, Reduction::kSum));
  const double replicas = static_cast<double>(world_->size() / ep_size_);
  const double dense_squares = zero_ ? sums[4] : Squared(GlobalGradNorm(dense, pool_));
  const double squares = dense_squares + sums[3] / replicas + sums[5];
  GlobalStepLoss global;
  global.loss = static_cast<float>(sums[0]);
  global.ce_loss = static_cast<float>(sums[1]);
  global.aux_loss = static_cast<float>(sums[2]);
  // As UnscaleAndClipGradNorm (optim/grad_clip.h), on the norm of the whole model.
  const float factor = UnscaleAndClipFactor(static_cast<float>(std::sqrt(squares)), inv_loss_scale,
                                            static_cast<float>(grad_clip), &global.grad_norm);
  if (factor != 1.0f) {
    std::vector<std::span<float>> all = dense;
    all.insert(all.end(), experts.begin(), experts.end());
    all.insert(all.end(), shards.begin(), shards.end());
    ScaleGrads(all, factor, pool_);
    if (zero_) zero_->ScaleGradients(factor);
  }
  return global;
}

Status DistributedRank::SumOverReplicas(std::span<int64_t> counts) {
  if (groups_.expert_dp->size() == 1 || counts.empty()) return Status::Ok();
  return groups_.expert_dp->AllReduceInPlace<int64_t>(counts, Reduction::kSum);
}

Status DistributedRank::SumOverWorld(std::vector<std::vector<int64_t>>& load) {
  if (load.empty()) return Status::Ok();  // no MoE layers, on every rank alike
  std::vector<int64_t> flat;
  for (const std::vector<int64_t>& layer : load)
    flat.insert(flat.end(), layer.begin(), layer.end());
  SY_RETURN_IF_ERROR(world_->AllReduceInPlace<int64_t>(flat, Reduction::kSum));
  size_t at = 0;
  for (std::vector<int64_t>& layer : load) {
    for (int64_t& n : layer) n = flat[at++];
  }
  return Status::Ok();
}

std::string DistributedRank::ShardingReport() const {
  if (!zero_) return std::string();
  return FormatZero3Memory(zero_->memory()) +
         (concurrent_mpi_ ? "\n  all-gathers prefetched one unit ahead (MPI_THREAD_MULTIPLE)"
                          : "\n  all-gathers not prefetched: MPI lacks MPI_THREAD_MULTIPLE");
}

}  // namespace sy::launcher
