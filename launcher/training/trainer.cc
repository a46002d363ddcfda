// Trainer: creation (backend, data, model, optimizer, the distributed rank) and the accessors.
// The step, the evaluation and the checkpoints are in trainer_step.cc, trainer_evaluation.cc and
// trainer_checkpointing.cc.
#include "launcher/training/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "launcher/training/distributed_rank.h"
#include "launcher/training/loss_share_expert_compute.h"
#include "launcher/training/rank_collectives.h"
#include "launcher/training/training_memory.h"
#include "parallel/expert_parallel_compute.h"
#include "storage/hdf5/durable_replace.h"

namespace sy::launcher {

Trainer::Trainer(const TrainConfig& config) : config_(config) {}

Trainer::~Trainer() {
  // Zero3 removes its hooks from the model; the layers' expert-parallel computes point into
  // dist_'s topology and communicators.
  if (dist_) dist_->DetachModel();
  working_set_.reset();   // borrows the store
  expert_store_.reset();  // borrows the optimizer and the model's expert tensors
  store_fs_.reset();
  model_.reset();
  dist_.reset();
}

bool Trainer::host_backend() const { return backend_->device().is_host(); }

int Trainer::rank() const { return dist_ ? dist_->rank() : 0; }
int Trainer::world_size() const { return dist_ ? dist_->size() : 1; }

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

std::string Trainer::ShardingReport() const { return dist_ ? dist_->ShardingReport() : ""; }

Status Trainer::BroadcastRootStatus(const Status& status) {
  return dist_ ? BroadcastStatus(dist_->world(), status) : status;
}

Result<int64_t> Trainer::BroadcastRootValue(int64_t value) {
  if (dist_) {
    SY_RETURN_IF_ERROR(dist_->world().Broadcast<int64_t>(std::span<int64_t>(&value, 1), 0));
  }
  return value;
}

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, Communicator* world,
                                                 bool concurrent_mpi) {
  std::unique_ptr<Trainer> trainer(new Trainer(config));
  SY_RETURN_IF_ERROR(
      trainer->Init(world != nullptr && world->size() > 1 ? world : nullptr, concurrent_mpi));
  return trainer;
}

Status Trainer::Init(Communicator* world, bool concurrent_mpi) {
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
  backend_options.sim.compute_gflops = config_.train.sim_gflops;
  if (config_.train.sim_link_gbps > 0) backend_options.sim.link_gbps = config_.train.sim_link_gbps;
  if (config_.train.sim_link_latency_us > 0) {
    backend_options.sim.link_latency_us = config_.train.sim_link_latency_us;
  }
  SY_ASSIGN_OR_RETURN(backend_, CreateBackend(device, backend_options));
  const Precision precision = config_.train.precision;
  if (precision == Precision::kF16) {
    SY_ASSIGN_OR_RETURN(DynamicLossScaler scaler, DynamicLossScaler::Create(config_.loss_scaler));
    loss_scaler_ = scaler;
  }
  const int threads = config_.train.threads > 0
                          ? config_.train.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(threads);

  SY_ASSIGN_OR_RETURN(dataset_, CreateDataset(config_.data));
  // The sizes the config implies, against the memory there is, before anything of their size is
  // built.
  const int world_size = world != nullptr ? world->size() : 1;
  const int64_t vocab =
      config_.model.vocab_size > 0 ? config_.model.vocab_size : dataset_->vocab_size();
  SY_RETURN_IF_ERROR(CheckTrainingMemory(config_,
                                         EstimateTrainingMemory(config_, vocab, world_size),
                                         AvailableHostMemory(), world_size));
  BatcherOptions train_options = MakeBatcherOptions(config_.data, Split::kTrain);
  // Per-task batches replace the mixed stream's rows (trainer_tasks.cc); its batcher stays for
  // the config's checks only.
  const bool per_task =
      HasTaskBatchSizes(config_.data) || config_.train.placement != Placement::kUniform;
  if (world != nullptr && !per_task) {
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
  const int64_t micro = config_.train.micro_batches;
  if (!per_task && train_options.batch_size % micro != 0) {
    return InvalidArgumentError(
        "config: 'train.micro_batches' " + std::to_string(micro) + " must divide the " +
        std::to_string(train_options.batch_size) + " rows each rank takes of a step (" +
        (world != nullptr ? "data.batch_size / ranks" : "data.batch_size") +
        "); choose a divisor of it, or set data.batch_size to a multiple of " +
        std::to_string(micro * world_size));
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
  // An expert store on any device, in one process or under mpirun: the model holds only the
  // experts a step activates (the working set; Note [working set over ranks], Note [working set
  // on a device]).
  ModelOptions model_options;
  // Mixed precision: the model holds the compute copy (the masters are the trainer's).
  model_options.weight_dtype = ComputeDType(precision);
  model_options.compute_dtype = ComputeDType(precision);
  model_options.bound_experts = UsesExpertWorkingSet(config_);
  // ZeRO-3 drops the memory of the dense full copies between uses (parallel/zero3.h).
  model_options.releasable_parameters = world != nullptr && config_.parallel.zero_stage == 3;
  SY_ASSIGN_OR_RETURN(model_, MoeModel::Create(*backend_, model_config, model_options));
  SY_RETURN_IF_ERROR(model_->InitializeParameters(config_.train.seed,
                                                  static_cast<float>(config_.train.init_stddev)));
  for (const Parameter& p : model_->parameters()) {
    const auto dims = p.value.shape().dims();
    all_params_.push_back({p.name, std::vector<int64_t>(dims.begin(), dims.end()), p.value.numel(),
                           p.is_expert, p.expert, p.layer});
  }
  if (model_options.bound_experts) {
    // The experts the model does not register, where it would: after their layer's parameters.
    const int64_t h = model_config.hidden_size, inter = model_config.moe_intermediate_size;
    for (int l = 0; l < model_config.num_layers; ++l) {
      if (!model_config.IsMoeLayer(l)) continue;
      const auto last = std::find_if(all_params_.rbegin(), all_params_.rend(),
                                     [l](const ParamInfo& p) { return p.layer == l; });
      SY_CHECK(last != all_params_.rend()) << "MoE layer " << l << " has no parameters";
      const auto at = last.base();
      std::vector<ParamInfo> experts;
      for (int e = 0; e < model_config.num_experts; ++e) {
        const std::pair<const char*, std::vector<int64_t>> parts[] = {
            {"w_gate", {inter, h}}, {"w_up", {inter, h}}, {"w_down", {h, inter}}};
        for (int k = 0; k < 3; ++k) {
          experts.push_back({ExpertParameterName(l, e, parts[k].first), parts[k].second, h * inter,
                             true, e, l, k});
        }
      }
      all_params_.insert(at, experts.begin(), experts.end());
    }
  }
  if (world != nullptr) {
    // Held by the trainer before it touches the model, so that a failure half way through
    // AttachModel is torn down in the order the destructor keeps.
    SY_ASSIGN_OR_RETURN(dist_, DistributedRank::Create(config_, *world, *backend_, pool_.get()));
    SY_RETURN_IF_ERROR(dist_->AttachModel(*model_, config_, concurrent_mpi));
    if (dist_->zero() != nullptr && precision != Precision::kF32) {
      // ZeRO-3 took its shards from the model's 16-bit values: the masters are the exact ones.
      const uint64_t seed = config_.train.seed;
      const float stddev = static_cast<float>(config_.train.init_stddev);
      SY_RETURN_IF_ERROR(dist_->zero()->LoadMasters([seed, stddev](const Parameter& p) {
        return ParameterStore::InitialValuesOf(p, seed, stddev);
      }));
    }
  }
  SY_ASSIGN_OR_RETURN(optimizer_, CreateOptimizer(config_.optimizer_options(), pool_.get()));
  SY_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::Create(config_.schedule_options()));
  schedule_ = std::make_unique<LrSchedule>(schedule);
  SY_RETURN_IF_ERROR(InitParamStates());
  if (per_task) SY_RETURN_IF_ERROR(InitTaskBatches());
  return config_.expert_store.enabled() ? InitExpertStore() : Status::Ok();
}

Status Trainer::InitParamStates() {
  // ParameterStore order; distributed, a rank holds its own experts, taken from dist_->experts().
  // On a GPU in one process the optimizer steps on the device (DeviceAdam): the gradients never
  // come to the host, and the moments live on the device until a checkpoint asks for them.
  const bool on_device = !dist_ && !config_.expert_store.enabled() &&
                         DeviceAdam::Supported(*backend_, config_.optimizer_options());
  for (Parameter& model_param : model_->parameters()) {
    Parameter* param = &model_param;
    if (dist_ && param->is_expert) {
      param = dist_->experts().Find(param->name);
      if (param == nullptr) continue;  // another rank's expert
    } else if (dist_ && dist_->zero()) {
      continue;  // sharded by Zero3
    }
    Parameter& p = *param;
    SY_CHECK(p.grad.dtype() == DType::kF32) << "trainer needs f32 gradients: " << p.name;
    ParamState s;
    s.param = &p;
    if (p.value.dtype() != DType::kF32) {
      // Mixed precision: the f32 master is the initial value itself, not the rounded copy.
      const std::vector<float> initial = ParameterStore::InitialValuesOf(
          p, config_.train.seed, static_cast<float>(config_.train.init_stddev));
      s.host_value = Tensor::Host(DType::kF32, p.value.shape());
      std::copy(initial.begin(), initial.end(), s.host_value.data<float>());
      // The optimizer on the device (DeviceAdam) keeps the master there and writes the copy
      // itself; on the host it writes host_compute.
      if (!on_device) {
        s.host_grad = host_backend() ? p.grad : Tensor::Host(DType::kF32, p.grad.shape());
        s.host_compute = host_backend() ? p.value : Tensor::Host(p.value.dtype(), p.value.shape());
      }
    } else if (host_backend()) {
      s.host_value = p.value;
      s.host_grad = p.grad;
    } else {
      s.host_value = Tensor::Host(DType::kF32, p.value.shape());
      if (!on_device) s.host_grad = Tensor::Host(DType::kF32, p.grad.shape());
      backend_->CopyAsync(p.value, s.host_value, backend_->compute_stream());
    }
    const size_t n = static_cast<size_t>(p.value.numel());
    if (optimizer_->NeedsFirstMoment() && !on_device) s.m.assign(n, 0.0f);
    if (optimizer_->NeedsSecondMoment() && !on_device) s.v.assign(n, 0.0f);
    state_of_[p.name] = states_.size();
    states_.push_back(std::move(s));
  }
  backend_->Synchronize();
  if (on_device) {
    SY_ASSIGN_OR_RETURN(device_adam_,
                        DeviceAdam::Create(*backend_, config_.optimizer_options(), &states_));
  }
  return Status::Ok();
}

namespace {

// The LocalExpertCompute under a layer's expert compute: the layer's own, or an expert-parallel
// rank's local experts (under its loss-share wrapper). Null for anything else.
LocalExpertCompute* FindLocalExperts(ExpertCompute& compute) {
  if (auto* local = dynamic_cast<LocalExpertCompute*>(&compute)) return local;
  if (auto* share = dynamic_cast<LossShareExpertCompute*>(&compute)) {
    return FindLocalExperts(share->inner());
  }
  if (auto* ep = dynamic_cast<ExpertParallelCompute*>(&compute)) return &ep->local();
  return nullptr;
}

// DIR/rank-R.store: rank R's expert store file.
std::string StoreFilePath(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".store";
}

// Removes the store files in `dir` of ranks at or above `world`, left by a run of more ranks (a
// run resumed at a smaller world size): the states they hold are in the checkpoint, and every
// state of this run is rewritten at its start, so they would only hold the disk. Their lock
// files go too: no other run can hold them, since this one holds rank 0's.
Status RemoveStoreFilesBeyond(storage::FileSystem* fs, const std::string& dir, int world) {
  std::error_code ec;
  bool removed = false;
  for (const auto& item : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = item.path().filename().string();
    constexpr std::string_view kPrefix = "rank-";
    const bool store = name.ends_with(".store");
    const bool lock = name.ends_with(".lock");
    const size_t suffix = store ? 6 : lock ? 5 : 0;
    if (suffix == 0 || name.size() <= kPrefix.size() + suffix || !name.starts_with(kPrefix)) {
      continue;
    }
    const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - suffix);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const int rank = std::stoi(digits);
    if (rank < world || digits != std::to_string(rank)) continue;
    if (lock) {
      if (::unlink(item.path().c_str()) != 0 && errno != ENOENT) {
        return ErrnoError("remove the lock file of a rank this run does not have",
                          item.path().string(), errno);
      }
      continue;
    }
    const std::string path = StoreFilePath(dir, rank);
    SY_RETURN_IF_ERROR(fs->Remove(path));
    spdlog::info(
        "expert_store: removed {}: this run has {} rank{}, and the states of rank {} of the run "
        "that wrote it are in the checkpoint",
        path, world, world == 1 ? "" : "s", rank);
    removed = true;
  }
  if (ec) {
    return InvalidArgumentError("config: 'expert_store.dir' " + dir +
                                " cannot be listed: " + ec.message());
  }
  return removed ? fs->SyncDir(dir) : Status::Ok();
}

// The expert store's entries, one per (decoder layer, expert), built from their tensors in order.
class ExpertEntries {
 public:
  // `moe_index`: the MoE layer index of each decoder layer with experts.
  explicit ExpertEntries(std::map<int, int> moe_index) : moe_index_(std::move(moe_index)) {}
  // Appends `part` to the entry of (layer, expert), created on first use; returns the entry.
  const ExpertEntry& Add(int layer, int expert, ExpertPart part) {
    auto [it, fresh] = index_.emplace(std::make_pair(layer, expert), entries_.size());
    if (fresh) {
      ExpertEntry e;
      e.name = "experts/layer" + std::to_string(layer) + "/expert" + std::to_string(expert);
      e.moe_layer = moe_index_.at(layer);
      e.decoder_layer = layer;
      e.expert = expert;
      entries_.push_back(std::move(e));
    }
    entries_[it->second].parts.push_back(part);
    return entries_[it->second];
  }
  std::vector<ExpertEntry> Take() { return std::move(entries_); }

 private:
  std::map<int, int> moe_index_;
  std::map<std::pair<int, int>, size_t> index_;
  std::vector<ExpertEntry> entries_;
};

}  // namespace

std::map<int, int> Trainer::MoeLayerIndex() const {
  std::map<int, int> index;
  for (const ParamInfo& p : all_params_) {
    if (p.is_expert) index.emplace(p.layer, 0);
  }
  int next = 0;
  for (auto& [layer, i] : index) i = next++;
  return index;
}

Status Trainer::InitExpertStore() {
  const ExpertStoreOptions& o = config_.expert_store;
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec) {
    return InvalidArgumentError("config: 'expert_store.dir' " + o.dir +
                                " cannot be created: " + ec.message());
  }
  // Before anything in the directory is touched: a second run on it fails here, at once.
  DirectoryLockOptions lock;
  lock.lock_file = "rank-" + std::to_string(rank()) + ".lock";
  lock.config_key = "expert_store.dir";
  lock.wait = config_.train.wait_for_lock;
  std::string warning;
  SY_ASSIGN_OR_RETURN(store_lock_, DirectoryLock::Acquire(o.dir, lock, &warning));
  if (!warning.empty()) spdlog::warn("{}", warning);
  SY_ASSIGN_OR_RETURN(store_fs_, storage::MakeFileSystem(StoreFileSystemName(o.filesystem)));
  if (is_root()) SY_RETURN_IF_ERROR(RemoveStoreFilesBeyond(store_fs_.get(), o.dir, world_size()));
  // What a creation of this rank's store killed mid-way left (its temporary, as large as the
  // store): no other process can be creating it, since this one holds its lock.
  SY_ASSIGN_OR_RETURN(std::vector<std::string> stale,
                      RemoveStaleTemporariesOf(StoreFilePath(o.dir, rank())));
  for (const std::string& old : stale) {
    spdlog::info("expert_store: removed {}, left by a run killed while creating the store", old);
  }
  ExpertStateStoreOptions options;
  options.path = StoreFilePath(o.dir, rank());
  options.fs = store_fs_.get();
  options.cache_bytes = static_cast<size_t>(o.cache_mib * 1024.0 * 1024.0);
  options.lfu.threshold = o.lfu_threshold;
  options.lfu.beta = o.decay;
  options.lfu.decay_every = o.decay_every;
  options.prefetch = o.prefetch;
  options.staging_bytes = static_cast<size_t>(o.StagingMib() * 1024.0 * 1024.0);
  options.sparse_adam = o.sparse_adam;
  // A resume imports every expert from the checkpoint: each is written to the store once, then.
  options.defer_initial = config_.checkpoint.resume || !config_.checkpoint.resume_from.empty();
  return InitExpertWorkingSet(std::move(options));
}

// Note [working set over ranks]. Under mpirun each rank's store holds its own experts, and the
// working set binds the ones its EP rank receives rows for, after the all-to-all of the counts
// (the LocalExpertCompute inside ExpertParallelCompute is bound: DistributedRank::AttachModel).
// What the resident path did with the experts' ParamStates, and what replaces it:
//   - gradient norm and clipping: DistributedRank::ReduceGradients sums this rank's expert
//     gradients' squares chunk by chunk in parameter order; it gets the working set's gradients
//     in that order (WorkingSetGradients), the others being zero, whose chunks add exactly 0.0,
//     so the norm, the clipping coefficient and the scaled gradients are the resident ones;
//   - the update: the store's Update, as in one process;
//   - the checkpoint: the save's owner exports each expert's master, m and v from the store
//     (OwnExpertState), the load imports each expert into the store as it arrives from rank 0
//     (DistributeExperts), so no rank holds all its experts' states at once;
//   - ZeRO-3 and the embedding partition touch only dense parameters: unchanged.
// With replicas (parallel.ep_size < world) each expert's gradient is summed over the
// expert-data-parallel group (the W / ep_size ranks holding it), and a replica's working set has
// only the experts its own EP group's tokens activated:
//   - the union: after the backward the replicas sum a count per local expert over the group
//     (BindReplicaUnion) and each binds a zeroed gradient, without weights, to the experts of the
//     union it did not compute (ExpertWorkingSet::BindGradient), so every replica passes the same
//     experts, in parameter order;
//   - the sum: beyond two replicas, one all-reduce per expert, its parts packed (AllReduceEach),
//     in the resident path and here alike. MPI may pick the all-reduce algorithm, and with it each
//     element's summation order, from the message length and the element's offset (Open MPI's
//     ring does); one packed call over the union would be shorter than the resident one over every
//     expert and round differently (tests/train: train_expert_store_dp4 under the ring). A call
//     per expert has the same length and offsets in both, so the union's sums are the resident
//     ones bit for bit; the experts outside the union are zero on every replica, as their
//     resident sums are. Two replicas add a + b, the same bits in either order: one packed call;
//   - the update: the store's Update takes an activated expert, and one of the union whose summed
//     gradient is not zero; one whose sum is zero is left to the replay of zero-gradient steps,
//     the arithmetic in-memory AdamW applies to it;
//   - the norm and the checkpoint: as above (each expert counted once: ReduceGradients divides the
//     world's sum by the replicas).
Status Trainer::InitExpertWorkingSet(ExpertStateStoreOptions options) {
  // One entry per (layer, expert) of this rank, its tensors in checkpoint order (w_gate, w_up,
  // w_down).
  ExpertEntries entries(MoeLayerIndex());
  for (const ParamInfo& p : all_params_) {
    if (!p.is_expert || !OwnsExpert(p.expert)) continue;
    const ExpertEntry& e =
        entries.Add(p.layer, p.expert, {nullptr, nullptr, static_cast<size_t>(p.numel)});
    SY_CHECK_EQ(static_cast<size_t>(p.expert_part) + 1, e.parts.size())
        << p.name << ": expert parts out of order";
  }
  options.resident = false;
  // The values ParameterStore::Initialize would give these parameters.
  const uint64_t seed = config_.train.seed;
  const float stddev = static_cast<float>(config_.train.init_stddev);
  options.initial_master = [seed, stddev](const ExpertEntry& e, std::span<float> master) {
    static constexpr const char* kParts[] = {"w_gate", "w_up", "w_down"};
    size_t at = 0;
    for (size_t k = 0; k < e.parts.size(); ++k) {
      InitialValues(ExpertParameterName(e.decoder_layer, e.expert, kParts[k]), ParamInit::kNormal,
                    seed, stddev, master.subspan(at, e.parts[k].n));
      at += e.parts[k].n;
    }
  };
  SY_ASSIGN_OR_RETURN(expert_store_,
                      ExpertStateStore::Create(options, optimizer_.get(), entries.Take()));
  working_set_ = std::make_unique<ExpertWorkingSet>(
      expert_store_.get(), *backend_, config_.model.hidden_size,
      config_.model.moe_intermediate_size, ComputeDType(config_.train.precision));
  for (int m = 0; m < model_->config().NumMoeLayers(); ++m) {
    LocalExpertCompute* local = FindLocalExperts(model_->moe_layer(m).expert_compute());
    SY_CHECK(local != nullptr && local->bound()) << "MoE layer " << m << " is not bound";
    local->set_weight_source(working_set_.get());
  }
  return Status::Ok();
}

bool Trainer::OwnsExpert(int expert) const {
  return !dist_ || ExpertOwner(expert, config_.model.num_experts, dist_->ep_size()) ==
                       rank() % dist_->ep_size();
}

std::vector<std::vector<std::span<float>>> Trainer::WorkingSetGradients() {
  std::vector<std::vector<std::span<float>>> grads;
  if (!working_set_) return grads;
  for (const ParamInfo& p : all_params_) {
    if (!p.is_expert) continue;
    std::span<float> g = working_set_->Grad(p.layer, p.expert, p.expert_part);
    if (g.empty()) continue;
    if (p.expert_part == 0) grads.emplace_back();
    SY_CHECK(!grads.empty() && grads.back().size() == static_cast<size_t>(p.expert_part))
        << p.name << ": expert parts out of order";
    grads.back().push_back(g);
  }
  return grads;
}

Status Trainer::BindReplicaUnion() {
  if (!working_set_ || !dist_ || dist_->size() == dist_->ep_size()) return Status::Ok();
  // This rank's experts in parameter order, the same on every replica, each counted where this
  // rank's working set holds it.
  std::vector<const ParamInfo*> mine;
  std::vector<int64_t> held;
  for (const ParamInfo& p : all_params_) {
    if (!p.is_expert || p.expert_part != 0 || !OwnsExpert(p.expert)) continue;
    mine.push_back(&p);
    held.push_back(working_set_->Grad(p.layer, p.expert, 0).empty() ? 0 : 1);
  }
  std::vector<int64_t> any = held;
  SY_RETURN_IF_ERROR(dist_->SumOverReplicas(any));
  for (size_t i = 0; i < mine.size(); ++i) {
    if (any[i] > 0 && held[i] == 0) {
      SY_RETURN_IF_ERROR(working_set_->BindGradient(mine[i]->layer, mine[i]->expert));
    }
  }
  return Status::Ok();
}

std::vector<std::span<float>> Trainer::ClippedGradients() {
  std::vector<std::span<float>> grads;
  grads.reserve(all_params_.size());
  if (!working_set_) {
    for (ParamState& s : states_) {
      grads.emplace_back(s.host_grad.data<float>(), static_cast<size_t>(s.host_grad.numel()));
    }
    return grads;
  }
  // states_ holds the dense parameters in the same order, without the experts.
  size_t next = 0;
  for (const ParamInfo& p : all_params_) {
    if (p.is_expert) {
      std::span<float> g = working_set_->Grad(p.layer, p.expert, p.expert_part);
      if (!g.empty()) grads.push_back(g);
      continue;
    }
    SY_CHECK_LT(next, states_.size()) << "dense parameters";
    ParamState& s = states_[next++];
    SY_CHECK_EQ(s.param->name, p.name) << "dense parameter order";
    grads.emplace_back(s.host_grad.data<float>(), static_cast<size_t>(s.host_grad.numel()));
  }
  return grads;
}

Status Trainer::ConsolidateExperts() {
  return expert_store_ ? expert_store_->Consolidate() : Status::Ok();
}

std::vector<std::pair<std::string, std::vector<int64_t>>> Trainer::CheckpointParameters() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const ParamInfo& p : all_params_) out.emplace_back(p.name, p.shape);
  return out;
}

std::vector<std::vector<float>> Trainer::ParameterValues() {
  std::vector<std::vector<float>> out;
  backend_->Synchronize();
  if (device_adam_) device_adam_->SyncToHost();
  for (ParamState& s : states_) {
    const float* p = s.host_value.data<float>();
    out.emplace_back(p, p + s.host_value.numel());
  }
  return out;
}

}  // namespace sy::launcher
