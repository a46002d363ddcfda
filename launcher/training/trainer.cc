#include "launcher/training/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <thread>
#include <unordered_map>

#include "launcher/training/loss_share_expert_compute.h"
#include "launcher/training/timed_communicator.h"
#include "optim/grad_clip.h"
#include "parallel/embedding_partition.h"
#include "parallel/expert_parallel_compute.h"
#include "parallel/topology.h"
#include "parallel/zero3.h"

namespace sy::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The keys of `a` and `b` (model and data blocks of two effective configs) that differ.
std::string FirstDifference(const nlohmann::json& a, const nlohmann::json& b,
                            const std::string& prefix) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items()) {
      const std::string key = prefix + "." + k;
      if (!b.contains(k)) return key;
      std::string d = FirstDifference(v, b.at(k), key);
      if (!d.empty()) return d;
    }
    for (const auto& [k, v] : b.items()) {
      if (!a.contains(k)) return prefix + "." + k;
    }
    return "";
  }
  return a == b ? "" : prefix;
}

// Collective over `comm`: every rank returns the status `root` passes in (the others' `status` is
// ignored), so a failure seen by one rank ends the operation on all of them.
Status BroadcastStatus(Communicator& comm, const Status& status, int root = 0) {
  int64_t header[2] = {static_cast<int64_t>(status.code()),
                       static_cast<int64_t>(status.message().size())};
  SY_RETURN_IF_ERROR(comm.Broadcast<int64_t>(header, root));
  std::string message = comm.rank() == root ? status.message() : std::string();
  message.resize(static_cast<size_t>(header[1]));
  SY_RETURN_IF_ERROR(comm.Broadcast(message.data(), message.size(), ElementType::kByte, root));
  if (header[0] == static_cast<int64_t>(StatusCode::kOk)) return Status::Ok();
  return Status(static_cast<StatusCode>(header[0]), message);
}

// Collective: `data` (resized to root's size on the other ranks) from `root` on every rank.
template <typename T>
Status BroadcastVector(Communicator& comm, std::vector<T>& data, int root = 0) {
  int64_t n = static_cast<int64_t>(data.size());
  SY_RETURN_IF_ERROR(comm.Broadcast<int64_t>(std::span<int64_t>(&n, 1), root));
  data.resize(static_cast<size_t>(n));
  return comm.Broadcast<T>(std::span<T>(data), root);
}

// Collective: every rank's `local` concatenated in rank order, and where each rank's part starts
// (size() + 1 offsets).
template <typename T>
Status AllGatherVector(Communicator& comm, const std::vector<T>& local, std::vector<T>* all,
                       std::vector<size_t>* offsets) {
  const size_t p = static_cast<size_t>(comm.size());
  std::vector<int64_t> counts(p);
  const int64_t mine = static_cast<int64_t>(local.size());
  SY_RETURN_IF_ERROR(comm.AllGather<int64_t>(std::span<const int64_t>(&mine, 1), counts));
  std::vector<size_t> sizes(p), displs(p);
  offsets->assign(p + 1, 0);
  for (size_t r = 0; r < p; ++r) {
    sizes[r] = static_cast<size_t>(counts[r]);
    displs[r] = (*offsets)[r];
    (*offsets)[r + 1] = (*offsets)[r] + sizes[r];
  }
  all->resize((*offsets)[p]);
  return comm.AllGatherV<T>(std::span<const T>(local), std::span<T>(*all), sizes, displs);
}

// Copies the flat spans into one buffer, or back (`to_spans`).
void Pack(std::span<const std::span<float>> spans, std::vector<float>& buffer, bool to_spans) {
  size_t total = 0;
  for (std::span<float> s : spans) total += s.size();
  if (!to_spans) buffer.resize(total);
  size_t at = 0;
  for (std::span<float> s : spans) {
    if (to_spans) {
      std::copy(buffer.begin() + static_cast<std::ptrdiff_t>(at),
                buffer.begin() + static_cast<std::ptrdiff_t>(at + s.size()), s.begin());
    } else {
      std::copy(s.begin(), s.end(), buffer.begin() + static_cast<std::ptrdiff_t>(at));
    }
    at += s.size();
  }
}

// Collective: sums `spans` elementwise over `comm`, as one packed all-reduce.
Status AllReduceSpans(Communicator& comm, std::span<const std::span<float>> spans) {
  if (comm.size() == 1 || spans.empty()) return Status::Ok();
  std::vector<float> packed;
  Pack(spans, packed, /*to_spans=*/false);
  SY_RETURN_IF_ERROR(comm.AllReduceInPlace<float>(packed, Reduction::kSum));
  Pack(spans, packed, /*to_spans=*/true);
  return Status::Ok();
}

double Squared(float norm) { return static_cast<double>(norm) * static_cast<double>(norm); }

}  // namespace

// The distributed state of one rank (Create with a world of more than one rank).
struct Trainer::Distributed {
  std::shared_ptr<CommunicationClock> clock = std::make_shared<CommunicationClock>();
  std::unique_ptr<Communicator> world;  // a timed duplicate of the caller's world
  ExpertParallelGroups groups;          // EP group and expert-DP group, timed
  std::unique_ptr<Topology> ep_topology;
  // This rank's experts, under their global ids. MoeModel builds every expert before the layers'
  // expert compute is replaced; InitDistributed drops those copies from the model's store (their
  // names stay, with undefined tensors), so the checkpoint takes the experts from here.
  ParameterStore experts;
  std::vector<LossShareExpertCompute*> layers;  // per MoE layer, owned by the layer
  // parallel.zero_stage 3: the dense parameters, gradients and optimizer state, sharded over the
  // world (parallel/zero3.h). The trainer's states then hold only this rank's experts.
  std::unique_ptr<Zero3> zero;
  // parallel.embedding_partition: the token embedding table, partitioned by columns over the
  // world (owned by the model). Its Parameter is a column shard, stepped like a dense one but not
  // all-reduced; checkpoints hold the whole table.
  EmbeddingPartition* embedding = nullptr;
  int ep_size = 1;
  int experts_per_rank = 0;
};

Trainer::Trainer(const TrainConfig& config) : config_(config) {}

Trainer::~Trainer() {
  // Zero3 removes its hooks from the model; the layers' expert-parallel computes point into
  // dist_'s topology and communicators.
  if (dist_) dist_->zero.reset();
  model_.reset();
  dist_.reset();
}

bool Trainer::host_backend() const { return backend_->device().is_host(); }

int Trainer::rank() const { return dist_ ? dist_->world->rank() : 0; }
int Trainer::world_size() const { return dist_ ? dist_->world->size() : 1; }

int64_t Trainer::num_parameters() const {
  int64_t n = 0;
  for (const ParamInfo& p : all_params_) n += p.numel;
  return n;
}

int64_t Trainer::num_expert_parameters() const {
  int64_t n = 0;
  for (const ParamInfo& p : all_params_) n += p.is_expert ? p.numel : 0;
  return n;
}

std::string Trainer::ShardingReport() const {
  if (!dist_ || !dist_->zero) return std::string();
  return FormatZero3Memory(dist_->zero->memory()) +
         (concurrent_mpi_ ? "\n  all-gathers prefetched one unit ahead (MPI_THREAD_MULTIPLE)"
                          : "\n  all-gathers not prefetched: MPI lacks MPI_THREAD_MULTIPLE");
}

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, Communicator* world,
                                                 bool concurrent_mpi) {
  std::unique_ptr<Trainer> trainer(new Trainer(config));
  trainer->concurrent_mpi_ = concurrent_mpi;
  SY_RETURN_IF_ERROR(trainer->Init(world != nullptr && world->size() > 1 ? world : nullptr));
  return trainer;
}

Status Trainer::Init(Communicator* world) {
  if (world == nullptr && config_.parallel.zero_stage == 3) {
    return InvalidArgumentError(
        "config: 'parallel.zero_stage' 3 shards the dense state over the data-parallel ranks, "
        "but this is a single process; run under mpirun -np N, or set parallel.zero_stage=0");
  }
  if (world == nullptr && config_.parallel.ep_size > 1) {
    return InvalidArgumentError("config: 'parallel.ep_size' is " +
                                std::to_string(config_.parallel.ep_size) +
                                " but this is a single process; run under mpirun -np N with N a "
                                "multiple of it, or set parallel.ep_size=1");
  }
  SY_ASSIGN_OR_RETURN(Device device, ParseDevice(config_.train.device));
  BackendOptions backend_options;
  backend_options.num_threads = config_.train.threads;
  SY_ASSIGN_OR_RETURN(backend_, CreateBackend(device, backend_options));
  const int threads = config_.train.threads > 0
                          ? config_.train.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(threads);

  SY_ASSIGN_OR_RETURN(dataset_, CreateDataset(config_.data));
  BatcherOptions train_options = MakeBatcherOptions(config_.data, Split::kTrain);
  if (world != nullptr) {
    const int w = world->size();
    if (config_.data.batch_size % w != 0) {
      return InvalidArgumentError(
          "config: 'data.batch_size' " + std::to_string(config_.data.batch_size) +
          " is the global batch and must divide over the " + std::to_string(w) +
          " data-parallel ranks; choose a multiple of " + std::to_string(w));
    }
    // Rank r's rows [r*B/W, (r+1)*B/W) of the global batch: the Batcher's shard r of W shards of
    // B/W rows reads exactly those examples.
    train_options.batch_size = config_.data.batch_size / w;
    train_options.num_shards = w;
    train_options.shard = world->rank();
  }
  SY_ASSIGN_OR_RETURN(Batcher train, Batcher::Create(dataset_.get(), train_options));
  train_batcher_ = std::make_unique<Batcher>(std::move(train));
  SY_ASSIGN_OR_RETURN(
      Batcher eval,
      Batcher::Create(dataset_.get(), MakeBatcherOptions(config_.data, Split::kEval)));
  eval_batcher_ = std::make_unique<Batcher>(std::move(eval));

  ModelConfig model_config = config_.model;
  if (model_config.vocab_size == 0) model_config.vocab_size = dataset_->vocab_size();
  if (model_config.vocab_size < dataset_->vocab_size()) {
    return InvalidArgumentError("config: 'model.vocab_size' is " +
                                std::to_string(model_config.vocab_size) + " but the data uses " +
                                std::to_string(dataset_->vocab_size()) +
                                " token ids; set model.vocab_size to 0 (the data's) or larger");
  }
  config_.model = model_config;
  SY_ASSIGN_OR_RETURN(model_, MoeModel::Create(*backend_, model_config));
  SY_RETURN_IF_ERROR(model_->InitializeParameters(config_.train.seed,
                                                  static_cast<float>(config_.train.init_stddev)));
  for (const Parameter& p : model_->parameters()) {
    const auto dims = p.value.shape().dims();
    all_params_.push_back({p.name, std::vector<int64_t>(dims.begin(), dims.end()), p.value.numel(),
                           p.is_expert, p.expert});
  }
  if (world != nullptr) SY_RETURN_IF_ERROR(InitDistributed(*world, model_config));
  SY_ASSIGN_OR_RETURN(optimizer_, CreateOptimizer(config_.optimizer_options(), pool_.get()));
  SY_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::Create(config_.schedule_options()));
  schedule_ = std::make_unique<LrSchedule>(schedule);
  if (dist_ && config_.parallel.zero_stage == 3) {
    Zero3Options zero_options;
    zero_options.optimizer = config_.optimizer_options();
    // The expert layers call MPI from this thread during Forward and Backward; a prefetching
    // ZeRO-3 thread calls it at the same time (on its own communicator), which needs
    // MPI_THREAD_MULTIPLE (cmd_train asks for it; Open MPI provides it).
    zero_options.prefetch = concurrent_mpi_;
    SY_ASSIGN_OR_RETURN(dist_->zero,
                        Zero3::Create(*model_, *dist_->world, zero_options, pool_.get()));
  }
  return InitParamStates();
}

Status Trainer::InitDistributed(Communicator& world, const ModelConfig& model_config) {
  const ParallelOptions& par = config_.parallel;
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
  if (par.embedding_partition && model_config.hidden_size % w != 0) {
    return InvalidArgumentError(
        "config: 'parallel.embedding_partition' splits the embedding columns over the " +
        std::to_string(w) + " ranks, but 'model.hidden_size' " +
        std::to_string(model_config.hidden_size) + " is not a multiple of " + std::to_string(w) +
        "; choose another world size or set parallel.embedding_partition=false");
  }
  dist_ = std::make_unique<Distributed>();
  dist_->ep_size = par.ep_size;
  // A duplicate of the world, timed, so the step can report its communication time.
  SY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> dup, world.Split(0, world.rank()));
  dist_->world = std::make_unique<TimedCommunicator>(std::move(dup), dist_->clock);
  SY_ASSIGN_OR_RETURN(dist_->groups, MakeExpertParallelGroups(*dist_->world, par.ep_size));
  SY_ASSIGN_OR_RETURN(dist_->ep_topology, Topology::Create(*dist_->groups.ep, topology_options));
  if (model_config.num_experts > 0) {
    dist_->experts_per_rank = model_config.num_experts / par.ep_size;
    const ExpertComputeFactory factory = ExpertParallelCompute::Factory(
        *dist_->ep_topology, model_config,
        par.hierarchical_a2a ? AllToAllAlgorithm::kHierarchical : AllToAllAlgorithm::kFlat);
    int m = 0;
    for (int l = 0; l < model_config.num_layers; ++l) {
      if (!model_config.IsMoeLayer(l)) continue;
      SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertCompute> experts,
                          factory(*backend_, dist_->experts, l, DType::kF32, /*with_grad=*/true));
      auto shared = std::make_unique<LossShareExpertCompute>(std::move(experts));
      dist_->layers.push_back(shared.get());
      model_->moe_layer(m++).set_expert_compute(std::move(shared));
    }
    // Same (seed, name) -> values as the model's copies of these experts.
    SY_RETURN_IF_ERROR(dist_->experts.Initialize(*backend_, config_.train.seed,
                                                 static_cast<float>(config_.train.init_stddev)));
    // The model registered every expert before its expert compute was replaced, and nothing
    // computes with those copies now: drop them, so a rank holds only its own experts' memory.
    for (Parameter& p : model_->parameters()) {
      if (!p.is_expert) continue;
      p.value = Tensor();
      p.grad = Tensor();
    }
  }
  if (par.embedding_partition) {
    // Every rank initialised the whole table from the same seed; each keeps its columns.
    SY_ASSIGN_OR_RETURN(dist_->embedding, InstallEmbeddingPartition(*model_, *dist_->world));
  }
  return Status::Ok();
}

Status Trainer::InitParamStates() {
  // ParameterStore order; distributed, a rank holds its own experts, taken from dist_->experts.
  for (Parameter& model_param : model_->parameters()) {
    Parameter* param = &model_param;
    if (dist_ && param->is_expert) {
      param = dist_->experts.Find(param->name);
      if (param == nullptr) continue;  // another rank's expert
    } else if (dist_ && dist_->zero) {
      continue;  // sharded by Zero3
    }
    Parameter& p = *param;
    SY_CHECK(p.value.dtype() == DType::kF32) << "trainer needs f32 parameters: " << p.name;
    ParamState s;
    s.param = &p;
    if (host_backend()) {
      s.host_value = p.value;
      s.host_grad = p.grad;
    } else {
      s.host_value = Tensor::Host(DType::kF32, p.value.shape());
      s.host_grad = Tensor::Host(DType::kF32, p.grad.shape());
      backend_->CopyAsync(p.value, s.host_value, backend_->compute_stream());
    }
    const size_t n = static_cast<size_t>(p.value.numel());
    if (optimizer_->NeedsFirstMoment()) s.m.assign(n, 0.0f);
    if (optimizer_->NeedsSecondMoment()) s.v.assign(n, 0.0f);
    states_.push_back(std::move(s));
  }
  backend_->Synchronize();
  return Status::Ok();
}

Result<StepReport> Trainer::Step() {
  // Communication time is read at each phase boundary and taken out of that phase.
  auto comm = [this] { return dist_ ? dist_->clock->seconds : 0.0; };
  const double comm_start = comm();
  const auto start = Clock::now();
  SY_RETURN_IF_ERROR(train_batcher_->Next(&batch_));
  const auto data_done = Clock::now();
  const double comm_data = comm();
  if (dist_ && dist_->zero) {
    dist_->zero->ZeroGrads();  // not the model's: that would commit every released page
  } else {
    model_->ZeroGrads();
  }
  if (dist_) dist_->experts.ZeroGrads(*backend_);
  SY_ASSIGN_OR_RETURN(LossReport loss, model_->Forward(batch_.tokens, batch_.targets));
  backend_->Synchronize();
  float share = 1.0f;
  if (dist_) {
    // This rank's share of the global targets weights its loss (LossShareExpertCompute).
    int64_t targets = loss.num_targets;
    SY_RETURN_IF_ERROR(
        dist_->world->AllReduceInPlace<int64_t>(std::span<int64_t>(&targets, 1), Reduction::kSum));
    share = targets > 0 ? static_cast<float>(static_cast<double>(loss.num_targets) /
                                             static_cast<double>(targets))
                        : 0.0f;
    for (LossShareExpertCompute* layer : dist_->layers) layer->set_share(share);
    if (dist_->zero) dist_->zero->set_gradient_prescale(share);
    // The embedding's gradient slices carry each rank's share as they are exchanged.
    if (dist_->embedding) dist_->embedding->set_gradient_prescale(share);
  }
  const auto forward_done = Clock::now();
  const double comm_forward = comm();
  SY_RETURN_IF_ERROR(model_->Backward());
  if (!host_backend()) {
    for (ParamState& s : states_) {
      backend_->CopyAsync(s.param->grad, s.host_grad, backend_->compute_stream());
    }
  }
  backend_->Synchronize();
  const auto backward_done = Clock::now();
  const double comm_backward = comm();

  std::vector<std::span<float>> grads;
  grads.reserve(states_.size());
  for (ParamState& s : states_) {
    grads.emplace_back(s.host_grad.data<float>(), static_cast<size_t>(s.host_grad.numel()));
  }
  StepReport report;
  if (dist_) {
    SY_RETURN_IF_ERROR(SyncGradients(loss, share, &report));
  } else {
    report.grad_norm =
        config_.train.grad_clip > 0
            ? ClipGradNorm(grads, static_cast<float>(config_.train.grad_clip), pool_.get())
            : GlobalGradNorm(grads, pool_.get());
    report.loss = loss.loss;
    report.ce_loss = loss.ce_loss;
    report.aux_loss = loss.aux_loss;
  }
  report.lr = schedule_->Lr(step_);
  report.skipped = !std::isfinite(report.grad_norm);
  if (!report.skipped) {
    std::vector<ParamGroup> groups;
    groups.reserve(states_.size());
    for (ParamState& s : states_) {
      ParamGroup g;
      g.param = s.host_value.data<float>();
      g.grad = s.host_grad.data<float>();
      g.m = s.m.empty() ? nullptr : s.m.data();
      g.v = s.v.empty() ? nullptr : s.v.data();
      g.n = static_cast<size_t>(s.host_value.numel());
      g.step = &s.opt_step;
      groups.push_back(g);
    }
    optimizer_->Step(groups, report.lr);
    if (dist_ && dist_->zero) SY_RETURN_IF_ERROR(dist_->zero->Step(report.lr));
    if (!host_backend()) {
      for (ParamState& s : states_) {
        backend_->CopyAsync(s.host_value, s.param->value, backend_->compute_stream());
      }
      backend_->Synchronize();
    }
  }
  const auto optimizer_done = Clock::now();
  const double comm_optimizer = comm();
  if (!config_.log.routing_trace.empty()) RecordRouting();
  ++step_;
  for (int m = 0; m < model_->config().NumMoeLayers(); ++m) {
    report.expert_load.push_back(model_->moe_layer(m).plan().routed);
  }
  if (dist_ && !report.expert_load.empty()) {
    // The global load: every rank's routing, summed.
    std::vector<int64_t> flat;
    for (const auto& layer : report.expert_load)
      flat.insert(flat.end(), layer.begin(), layer.end());
    SY_RETURN_IF_ERROR(dist_->world->AllReduceInPlace<int64_t>(flat, Reduction::kSum));
    size_t at = 0;
    for (auto& layer : report.expert_load) {
      for (int64_t& n : layer) n = flat[at++];
    }
  }
  model_->ReleaseActivations();
  report.step = step_;
  report.tokens = batch_.batch_size() * batch_.seq_len() * world_size();
  report.seconds = Seconds(start, Clock::now());
  report.data_seconds = Seconds(start, data_done) - (comm_data - comm_start);
  report.forward_seconds = Seconds(data_done, forward_done) - (comm_forward - comm_data);
  report.backward_seconds = Seconds(forward_done, backward_done) - (comm_backward - comm_forward);
  report.optimizer_seconds =
      Seconds(backward_done, optimizer_done) - (comm_optimizer - comm_backward);
  report.communication_seconds = comm() - comm_start;
  return report;
}

Status Trainer::SyncGradients(const LossReport& local, float share, StepReport* report) {
  Distributed& d = *dist_;
  std::vector<std::span<float>> dense, experts, shards;
  for (ParamState& s : states_) {
    std::span<float> g(s.host_grad.data<float>(), static_cast<size_t>(s.host_grad.numel()));
    if (s.param->is_column_shard()) {
      shards.push_back(g);  // complete on its owner (EmbeddingPartition::Backward)
    } else {
      (s.param->is_expert ? experts : dense).push_back(g);
    }
  }
  // The experts' gradients already carry each rank's share (LossShareExpertCompute); the dense
  // ones get it here, then each is summed over the ranks that hold it. Under ZeRO-3 the dense
  // gradients were prescaled and reduce-scattered into their shards during the backward.
  if (!d.zero) {
    if (share != 1.0f) ScaleGrads(dense, share, pool_.get());
    SY_RETURN_IF_ERROR(AllReduceSpans(*d.world, dense));
  }
  SY_RETURN_IF_ERROR(AllReduceSpans(*d.groups.expert_dp, experts));
  // The loss terms weighted by the shares, the experts' squared norm and the dense shards'
  // squared norm (ZeRO-3), and the embedding column slices' squared norm, summed over the world.
  // Each expert lives on world / ep_size ranks, so that sum counts it that many times; each
  // embedding column lives on one rank.
  double sums[6] = {share * static_cast<double>(local.loss),
                    share * static_cast<double>(local.ce_loss),
                    share * static_cast<double>(local.aux_loss),
                    Squared(GlobalGradNorm(experts, pool_.get())),
                    d.zero ? d.zero->LocalGradSquaredNorm() : 0.0,
                    shards.empty() ? 0.0 : Squared(GlobalGradNorm(shards, pool_.get()))};
  SY_RETURN_IF_ERROR(d.world->AllReduceInPlace<double>(sums, Reduction::kSum));
  const double replicas = static_cast<double>(d.world->size() / d.ep_size);
  const double dense_squares = d.zero ? sums[4] : Squared(GlobalGradNorm(dense, pool_.get()));
  const double squares = dense_squares + sums[3] / replicas + sums[5];
  report->loss = static_cast<float>(sums[0]);
  report->ce_loss = static_cast<float>(sums[1]);
  report->aux_loss = static_cast<float>(sums[2]);
  // As ClipGradNorm (optim/grad_clip.h), on the norm of the whole model.
  const float norm = static_cast<float>(std::sqrt(squares));
  report->grad_norm = norm;
  if (config_.train.grad_clip > 0 && std::isfinite(norm)) {
    const float coef = static_cast<float>(config_.train.grad_clip) / (norm + 1e-6f);
    if (coef < 1.0f) {
      std::vector<std::span<float>> all = dense;
      all.insert(all.end(), experts.begin(), experts.end());
      all.insert(all.end(), shards.begin(), shards.end());
      ScaleGrads(all, coef, pool_.get());
      if (d.zero) d.zero->ScaleGradients(coef);
    }
  }
  return Status::Ok();
}

void Trainer::RecordRouting() {
  const int moe_layers = model_->config().NumMoeLayers();
  if (moe_layers == 0) return;
  trace_.num_layers = static_cast<uint32_t>(moe_layers);
  trace_.num_experts = static_cast<uint32_t>(model_->config().num_experts);
  const uint32_t first_step = trace_.num_steps();
  // experts[layer][token]: the experts token `token` was routed to in `layer`, in expert order.
  const int64_t tokens =
      std::min<int64_t>(config_.log.routing_trace_tokens, batch_.batch_size() * batch_.seq_len());
  std::vector<std::vector<std::vector<uint32_t>>> experts(
      moe_layers, std::vector<std::vector<uint32_t>>(static_cast<size_t>(tokens)));
  for (int m = 0; m < moe_layers; ++m) {
    const DispatchPlan& plan = model_->moe_layer(m).plan();
    int64_t row = 0;
    for (int e = 0; e < plan.num_experts; ++e) {
      for (int64_t i = 0; i < plan.group_rows[e]; ++i, ++row) {
        const int64_t token = plan.row_token[row];
        if (token < tokens) experts[m][token].push_back(static_cast<uint32_t>(e));
      }
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    for (int m = 0; m < moe_layers; ++m) {
      for (uint32_t e : experts[m][t]) {
        trace_.accesses.push_back(
            {first_step + static_cast<uint32_t>(t), static_cast<uint32_t>(m), e});
      }
    }
  }
}

Result<EvalReport> Trainer::Evaluate() {
  EvalReport report;
  report.step = step_;
  report.accuracy = TaskAccuracy(dataset_->num_tasks());
  eval_batcher_->Rewind();
  Batch batch;
  double loss_sum = 0;
  for (int64_t b = 0; b < config_.train.eval_batches; ++b) {
    SY_RETURN_IF_ERROR(eval_batcher_->Next(&batch));
    SY_ASSIGN_OR_RETURN(LossReport loss, model_->Forward(batch.tokens, batch.targets));
    loss_sum += loss.ce_loss;
    const Tensor& logits = model_->logits();
    Tensor host_logits = logits;
    if (!host_backend()) {
      host_logits = Tensor::Host(DType::kF32, logits.shape());
      backend_->CopyAsync(logits, host_logits, backend_->compute_stream());
    }
    backend_->Synchronize();
    const int64_t rows = host_logits.dim(0), vocab = host_logits.dim(1);
    Tensor predictions = Tensor::Host(DType::kI32, batch.targets.shape());
    const float* l = host_logits.data<float>();
    int32_t* pred = predictions.data<int32_t>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = l + r * vocab;
      pred[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
    report.accuracy.Add(batch, predictions);
    model_->ReleaseActivations();
  }
  report.loss = static_cast<float>(loss_sum / static_cast<double>(config_.train.eval_batches));
  report.summary = report.accuracy.ToString(*dataset_);
  return report;
}

std::vector<std::vector<float>> Trainer::ParameterValues() {
  std::vector<std::vector<float>> out;
  backend_->Synchronize();
  for (ParamState& s : states_) {
    const float* p = s.host_value.data<float>();
    out.emplace_back(p, p + s.host_value.numel());
  }
  return out;
}

Status Trainer::SaveCheckpoint(const std::string& path) {
  if (dist_) return SaveDistributedCheckpoint(path);
  TrainCheckpoint ckpt;
  ckpt.config_json = config_.effective_json;
  ckpt.step = step_;
  ckpt.seed = config_.train.seed;
  ckpt.data_position = train_batcher_->SavePosition();
  std::vector<std::vector<float>> values = ParameterValues();
  for (size_t i = 0; i < states_.size(); ++i) {
    const ParamState& s = states_[i];
    const auto dims = s.param->value.shape().dims();
    const std::vector<int64_t> shape(dims.begin(), dims.end());
    ckpt.optimizer_steps.push_back(s.opt_step);
    ckpt.params.push_back({s.param->name, shape, std::move(values[i])});
    ckpt.optimizer_m.push_back({s.param->name, shape, s.m});
    ckpt.optimizer_v.push_back({s.param->name, shape, s.v});
  }
  return WriteTrainCheckpoint(path, ckpt);
}

Status Trainer::SaveDistributedCheckpoint(const std::string& path) {
  Distributed& d = *dist_;
  std::vector<std::vector<float>> values = ParameterValues();
  // The first EP group (world ranks 0 .. ep_size-1, EP rank = world rank) holds every expert
  // once; rank 0 gathers them from it: per expert parameter, in ParameterStore order, the value
  // then m and v where the optimizer keeps them.
  std::vector<float> gathered;
  std::vector<int64_t> gathered_steps;
  std::vector<size_t> offsets, step_offsets;
  if (rank() < d.ep_size) {
    std::vector<float> mine;
    std::vector<int64_t> my_steps;
    for (size_t i = 0; i < states_.size(); ++i) {
      const ParamState& s = states_[i];
      if (!s.param->is_expert) continue;
      mine.insert(mine.end(), values[i].begin(), values[i].end());
      mine.insert(mine.end(), s.m.begin(), s.m.end());
      mine.insert(mine.end(), s.v.begin(), s.v.end());
      my_steps.push_back(s.opt_step);
    }
    SY_RETURN_IF_ERROR(AllGatherVector(*d.groups.ep, mine, &gathered, &offsets));
    SY_RETURN_IF_ERROR(AllGatherVector(*d.groups.ep, my_steps, &gathered_steps, &step_offsets));
  }
  // Under ZeRO-3 the dense values are gathered into the model's tensors for the save, and the
  // dense optimizer state comes from the shards.
  std::unordered_map<std::string, DenseOptimizerState> dense_state;
  if (d.zero) {
    SY_RETURN_IF_ERROR(d.zero->GatherFullParameters());
    SY_ASSIGN_OR_RETURN(std::vector<DenseOptimizerState> states, d.zero->GatherOptimizerState());
    for (DenseOptimizerState& st : states) dense_state[st.name] = std::move(st);
  }
  // Column shards (the partitioned embedding): the whole [rows, full_cols] value, m and v,
  // gathered from every rank's columns onto every rank (the file has the one-process layout).
  std::unordered_map<std::string, size_t> held;
  for (size_t i = 0; i < states_.size(); ++i) held[states_[i].param->name] = i;
  std::unordered_map<size_t, std::vector<float>> full_m, full_v;
  for (size_t i = 0; i < states_.size(); ++i) {
    const ParamState& s = states_[i];
    if (!s.param->is_column_shard()) continue;
    const int64_t rows = s.param->value.dim(0), full = s.param->full_cols;
    SY_ASSIGN_OR_RETURN(values[i], GatherColumnShards(*d.world, rows, full, values[i]));
    if (!s.m.empty()) {
      SY_ASSIGN_OR_RETURN(full_m[i], GatherColumnShards(*d.world, rows, full, s.m));
    }
    if (!s.v.empty()) {
      SY_ASSIGN_OR_RETURN(full_v[i], GatherColumnShards(*d.world, rows, full, s.v));
    }
  }
  Status written = Status::Ok();
  if (is_root()) {
    TrainCheckpoint ckpt;
    ckpt.config_json = config_.effective_json;
    ckpt.step = step_;
    ckpt.seed = config_.train.seed;
    ckpt.data_position = train_batcher_->SavePosition();
    const bool with_m = optimizer_->NeedsFirstMoment(), with_v = optimizer_->NeedsSecondMoment();
    for (const ParamInfo& p : all_params_) {
      const std::vector<int64_t>& shape = p.shape;
      const size_t n = static_cast<size_t>(p.numel);
      std::vector<float> value, m, v;
      int64_t opt_step = 0;
      if (!p.is_expert && d.zero) {
        // The gathered full values; ZeRO-3 runs on the cpu backend only.
        const float* data = model_->parameters().Find(p.name)->value.data<float>();
        value.assign(data, data + n);
        DenseOptimizerState& st = dense_state.at(p.name);
        m = std::move(st.m);
        v = std::move(st.v);
        opt_step = st.step;
      } else if (!p.is_expert) {
        const size_t i = held.at(p.name);
        value = std::move(values[i]);
        m = full_m.count(i) ? std::move(full_m[i]) : states_[i].m;
        v = full_v.count(i) ? std::move(full_v[i]) : states_[i].v;
        opt_step = states_[i].opt_step;
      } else {
        const size_t owner = static_cast<size_t>(p.expert / d.experts_per_rank);
        auto take = [&](std::vector<float>& out) {
          SY_CHECK_LE(offsets[owner] + n, offsets[owner + 1]) << "expert data of rank " << owner;
          const auto first = gathered.begin() + static_cast<std::ptrdiff_t>(offsets[owner]);
          out.assign(first, first + static_cast<std::ptrdiff_t>(n));
          offsets[owner] += n;
        };
        take(value);
        if (with_m) take(m);
        if (with_v) take(v);
        SY_CHECK_LT(step_offsets[owner], step_offsets[owner + 1]) << "steps of rank " << owner;
        opt_step = gathered_steps[step_offsets[owner]++];
      }
      ckpt.optimizer_steps.push_back(opt_step);
      ckpt.params.push_back({p.name, shape, std::move(value)});
      ckpt.optimizer_m.push_back({p.name, shape, std::move(m)});
      ckpt.optimizer_v.push_back({p.name, shape, std::move(v)});
    }
    written = WriteTrainCheckpoint(path, ckpt);
  }
  if (d.zero) d.zero->ReleaseFullParameters();
  return BroadcastStatus(*d.world, written);
}

Status Trainer::CheckCheckpointConfig(const std::string& path, const std::string& saved_json) {
  nlohmann::json saved = nlohmann::json::parse(saved_json, nullptr, false);
  nlohmann::json ours = nlohmann::json::parse(config_.effective_json, nullptr, false);
  if (saved.is_discarded() || !saved.is_object()) {
    return DataLossError("checkpoint " + path + ": its config is not valid JSON");
  }
  for (const char* block : {"model", "data"}) {
    const nlohmann::json a = saved.value(block, nlohmann::json::object());
    const nlohmann::json b = ours.value(block, nlohmann::json::object());
    const std::string diff = FirstDifference(a, b, block);
    if (!diff.empty()) {
      return FailedPreconditionError(
          "checkpoint " + path + " was written for a different config: '" + diff +
          "' differs from the requested one; use the config the checkpoint was trained with, "
          "or point checkpoint.dir elsewhere");
    }
  }
  return Status::Ok();
}

Status Trainer::LoadCheckpointOnRoot(const std::string& path, TrainCheckpoint* ckpt) {
  SY_ASSIGN_OR_RETURN(std::string saved_config, ReadTrainCheckpointConfig(path));
  SY_RETURN_IF_ERROR(CheckCheckpointConfig(path, saved_config));
  // Every parameter of the model (distributed: every expert too, as the file holds them).
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const ParamInfo& p : all_params_) {
    names.push_back(p.name);
    shapes.push_back(p.shape);
  }
  SY_ASSIGN_OR_RETURN(*ckpt,
                      ReadTrainCheckpoint(path, names, shapes, optimizer_->NeedsFirstMoment(),
                                          optimizer_->NeedsSecondMoment()));
  return Status::Ok();
}

Status Trainer::LoadCheckpoint(const std::string& path) {
  TrainCheckpoint ckpt;
  if (!dist_) {
    SY_RETURN_IF_ERROR(LoadCheckpointOnRoot(path, &ckpt));
    return RestoreState(ckpt);
  }
  Communicator& world = *dist_->world;
  const Status read = is_root() ? LoadCheckpointOnRoot(path, &ckpt) : Status::Ok();
  SY_RETURN_IF_ERROR(BroadcastStatus(world, read));
  // Rank 0's checkpoint, packed (values, then m and v, per parameter in ParameterStore order).
  std::vector<float> packed;
  std::vector<uint8_t> position(ckpt.data_position.begin(), ckpt.data_position.end());
  std::vector<int64_t> step_and_steps = {ckpt.step};
  if (is_root()) {
    for (size_t i = 0; i < ckpt.params.size(); ++i) {
      for (const std::vector<float>* part :
           {&ckpt.params[i].data, &ckpt.optimizer_m[i].data, &ckpt.optimizer_v[i].data}) {
        packed.insert(packed.end(), part->begin(), part->end());
      }
    }
    step_and_steps.insert(step_and_steps.end(), ckpt.optimizer_steps.begin(),
                          ckpt.optimizer_steps.end());
  }
  SY_RETURN_IF_ERROR(BroadcastVector(world, packed));
  SY_RETURN_IF_ERROR(BroadcastVector(world, position));
  SY_RETURN_IF_ERROR(BroadcastVector(world, step_and_steps));
  if (!is_root()) {
    ckpt.step = step_and_steps[0];
    ckpt.optimizer_steps.assign(step_and_steps.begin() + 1, step_and_steps.end());
    ckpt.data_position.assign(position.begin(), position.end());
    const bool with_m = optimizer_->NeedsFirstMoment(), with_v = optimizer_->NeedsSecondMoment();
    size_t at = 0;
    auto take = [&](size_t n) {
      SY_CHECK_LE(at + n, packed.size()) << "broadcast checkpoint is short";
      std::vector<float> out(packed.begin() + static_cast<std::ptrdiff_t>(at),
                             packed.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
      return out;
    };
    for (const ParamInfo& p : all_params_) {
      const size_t n = static_cast<size_t>(p.numel);
      const std::vector<int64_t>& shape = p.shape;
      ckpt.params.push_back({p.name, shape, take(n)});
      ckpt.optimizer_m.push_back({p.name, shape, with_m ? take(n) : std::vector<float>()});
      ckpt.optimizer_v.push_back({p.name, shape, with_v ? take(n) : std::vector<float>()});
    }
  }
  return RestoreState(ckpt);
}

Status Trainer::RestoreState(TrainCheckpoint& ckpt) {
  SY_CHECK_EQ(ckpt.params.size(), ckpt.optimizer_steps.size()) << "checkpoint step counts";
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < ckpt.params.size(); ++i) index[ckpt.params[i].name] = i;
  // Everything is read and checked; only now does the trainer's state change.
  SY_RETURN_IF_ERROR(train_batcher_->RestorePosition(ckpt.data_position));
  for (ParamState& s : states_) {
    const size_t i = index.at(s.param->name);
    if (s.param->is_column_shard()) {
      // The file holds the whole [rows, full_cols] table; this rank takes its columns.
      const int64_t rows = s.param->value.dim(0), full = s.param->full_cols;
      const int r = rank(), n = world_size();
      auto take = [&](std::vector<float>& whole) {
        if (!whole.empty()) whole = TakeColumnShard(r, n, rows, full, whole);
      };
      take(ckpt.params[i].data);
      take(ckpt.optimizer_m[i].data);
      take(ckpt.optimizer_v[i].data);
    }
    SY_CHECK_EQ(ckpt.params[i].data.size(), static_cast<size_t>(s.host_value.numel()))
        << "checkpoint size of " << s.param->name;
    std::copy(ckpt.params[i].data.begin(), ckpt.params[i].data.end(), s.host_value.data<float>());
    s.m = std::move(ckpt.optimizer_m[i].data);
    s.v = std::move(ckpt.optimizer_v[i].data);
    s.opt_step = ckpt.optimizer_steps[i];
    if (!host_backend()) {
      backend_->CopyAsync(s.host_value, s.param->value, backend_->compute_stream());
    }
  }
  backend_->Synchronize();
  if (dist_ && dist_->zero) {
    // The dense values go into the model's tensors (every rank the same), from which each rank
    // takes its shard; likewise the optimizer state.
    std::vector<DenseOptimizerState> states;
    for (Parameter& p : model_->parameters()) {
      if (p.is_expert) continue;
      const size_t i = index.at(p.name);
      std::copy(ckpt.params[i].data.begin(), ckpt.params[i].data.end(), p.value.data<float>());
      states.push_back({p.name, std::move(ckpt.optimizer_m[i].data),
                        std::move(ckpt.optimizer_v[i].data), ckpt.optimizer_steps[i]});
    }
    SY_RETURN_IF_ERROR(dist_->zero->LoadFullParameters());
    SY_RETURN_IF_ERROR(dist_->zero->LoadOptimizerState(states));
  }
  step_ = ckpt.step;
  return Status::Ok();
}

Result<EvalReport> Trainer::Run(std::FILE* out) {
  const CheckpointOptions& ck = config_.checkpoint;
  if (ck.resume) {
    if (ck.dir.empty()) {
      return InvalidArgumentError(
          "config: 'checkpoint.resume' is true but 'checkpoint.dir' is empty; set checkpoint.dir");
    }
    // Rank 0 finds the checkpoint and reads it; the other ranks receive it.
    std::string latest;
    Status found = Status::Ok();
    if (is_root()) {
      Result<std::string> r = LatestCheckpoint(ck.dir);
      if (r.ok()) latest = *r;
      found = r.status();
    }
    if (dist_) found = BroadcastStatus(*dist_->world, found);
    SY_RETURN_IF_ERROR(found);
    SY_RETURN_IF_ERROR(LoadCheckpoint(latest));
    if (is_root()) {
      std::fprintf(out, "resumed from %s at step %lld\n", latest.c_str(),
                   static_cast<long long>(step_));
    } else {
      std::fprintf(out, "resumed at step %lld\n", static_cast<long long>(step_));
    }
  }
  // Rank 0 writes every output file; it checks now, not after the whole run, that it can.
  auto prepare_outputs = [&]() -> Status {
    if (!ck.dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(ck.dir, ec);
      if (ec) {
        return InvalidArgumentError("config: 'checkpoint.dir' " + ck.dir + ": cannot create (" +
                                    ec.message() + "); choose a writable directory");
      }
    }
    for (const std::string* path : {&config_.log.metrics, &config_.log.routing_trace}) {
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
  };
  Status prepared = is_root() ? prepare_outputs() : Status::Ok();
  if (dist_) prepared = BroadcastStatus(*dist_->world, prepared);
  SY_RETURN_IF_ERROR(prepared);
  std::ofstream metrics;
  if (!config_.log.metrics.empty() && is_root()) {
    metrics.open(config_.log.metrics, std::ios::app);
    if (!metrics) {
      return InvalidArgumentError("config: 'log.metrics' " + config_.log.metrics +
                                  ": cannot open for writing; choose a writable path");
    }
  }
  ProgressStyle style = config_.log.progress;
  if (style == ProgressStyle::kAuto) {
    style = isatty(fileno(out)) ? ProgressStyle::kBar : ProgressStyle::kLines;
  }
  const int64_t total = config_.train.steps;
  const int64_t first = step_;
  const auto start = Clock::now();
  int64_t tokens = 0;
  auto save = [&](bool final_save) -> Status {
    if (ck.dir.empty()) return Status::Ok();
    const std::string path = CheckpointPath(ck.dir, step_);
    SY_RETURN_IF_ERROR(SaveCheckpoint(path));
    if (style == ProgressStyle::kBar && !final_save) std::fprintf(out, "\n");
    std::fprintf(out, "checkpoint %s\n", path.c_str());
    if (ck.keep > 0 && is_root()) {
      // Newest `keep` survive; names sort by step.
      std::vector<std::string> all;
      for (const auto& e : std::filesystem::directory_iterator(ck.dir)) {
        if (IsCheckpointFileName(e.path().filename().string())) all.push_back(e.path().string());
      }
      std::sort(all.begin(), all.end());
      for (size_t i = 0; i + static_cast<size_t>(ck.keep) < all.size(); ++i) {
        std::filesystem::remove(all[i]);
      }
    }
    return Status::Ok();
  };
  while (step_ < total) {
    SY_ASSIGN_OR_RETURN(StepReport r, Step());
    tokens += r.tokens;
    const double elapsed = Seconds(start, Clock::now());
    const double tok_s = elapsed > 0 ? static_cast<double>(tokens) / elapsed : 0.0;
    const double eta = (step_ > first) ? elapsed / static_cast<double>(step_ - first) *
                                             static_cast<double>(total - step_)
                                       : 0.0;
    const bool log_now = step_ % config_.log.every == 0 || step_ == total || step_ == first + 1;
    if (metrics.is_open() && log_now) {
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
      metrics << line.dump() << "\n";
      metrics.flush();
    }
    if (style == ProgressStyle::kBar) {
      const int width = 30;
      const int filled = static_cast<int>(width * step_ / total);
      std::fprintf(out, "\r[%s%s] step %lld/%lld loss %.4f %.0f tok/s ETA %.0fs ",
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                   static_cast<long long>(step_), static_cast<long long>(total), r.loss, tok_s,
                   eta);
      std::fflush(out);
    } else if (style == ProgressStyle::kLines && log_now) {
      std::fprintf(out,
                   "step %lld/%lld loss %.4f aux %.4f lr %.3g grad_norm %.3f %.0f tok/s "
                   "ETA %.0fs\n",
                   static_cast<long long>(step_), static_cast<long long>(total), r.loss, r.aux_loss,
                   r.lr, r.grad_norm, tok_s, eta);
      std::fflush(out);
    }
    if (config_.train.eval_every > 0 && step_ % config_.train.eval_every == 0 && step_ < total) {
      SY_ASSIGN_OR_RETURN(EvalReport e, Evaluate());
      if (style == ProgressStyle::kBar) std::fprintf(out, "\n");
      std::fprintf(out, "eval step %lld loss %.4f: %s\n", static_cast<long long>(step_), e.loss,
                   e.summary.c_str());
      if (metrics.is_open()) {
        metrics << nlohmann::json{{"step", step_},
                                  {"eval_loss", e.loss},
                                  {"eval_exact_match", e.accuracy.total().exact_match()}}
                       .dump()
                << "\n";
      }
    }
    if (ck.every > 0 && step_ % ck.every == 0 && step_ < total) SY_RETURN_IF_ERROR(save(false));
  }
  if (style == ProgressStyle::kBar) std::fprintf(out, "\n");
  SY_RETURN_IF_ERROR(save(true));
  if (!config_.log.routing_trace.empty() && is_root()) {
    SY_RETURN_IF_ERROR(storage::WriteTraceFile(config_.log.routing_trace, trace_));
    std::fprintf(out, "routing trace %s (%u steps)\n", config_.log.routing_trace.c_str(),
                 trace_.num_steps());
  }
  SY_ASSIGN_OR_RETURN(EvalReport final_eval, Evaluate());
  if (metrics.is_open()) {
    metrics << nlohmann::json{{"step", step_},
                              {"eval_loss", final_eval.loss},
                              {"eval_exact_match", final_eval.accuracy.total().exact_match()}}
                   .dump()
            << "\n";
  }
  std::fprintf(out, "final step %lld eval loss %.4f time %.1fs accuracy: %s\n",
               static_cast<long long>(step_), final_eval.loss, Seconds(start, Clock::now()),
               final_eval.summary.c_str());
  return final_eval;
}

}  // namespace sy::launcher
