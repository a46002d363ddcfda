// Trainer: creation (backend, data, model, optimizer, the distributed rank) and the accessors.
// The step, the evaluation and the checkpoints are in trainer_step.cc, trainer_evaluation.cc and
// trainer_checkpointing.cc.
#include "launcher/training/trainer.h"

#include <algorithm>
#include <span>
#include <thread>
#include <utility>

#include "launcher/training/distributed_rank.h"
#include "launcher/training/rank_collectives.h"
#include "launcher/training/training_memory.h"

namespace sy::launcher {

Trainer::Trainer(const TrainConfig& config) : config_(config) {}

Trainer::~Trainer() {
  // Zero3 removes its hooks from the model; the layers' expert-parallel computes point into
  // dist_'s topology and communicators.
  if (dist_) dist_->DetachModel();
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
  SY_ASSIGN_OR_RETURN(backend_, CreateBackend(device, backend_options));
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
  if (world != nullptr) {
    // Held by the trainer before it touches the model, so that a failure half way through
    // AttachModel is torn down in the order the destructor keeps.
    SY_ASSIGN_OR_RETURN(dist_, DistributedRank::Create(config_, *world, *backend_, pool_.get()));
    SY_RETURN_IF_ERROR(dist_->AttachModel(*model_, config_, concurrent_mpi));
  }
  SY_ASSIGN_OR_RETURN(optimizer_, CreateOptimizer(config_.optimizer_options(), pool_.get()));
  SY_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::Create(config_.schedule_options()));
  schedule_ = std::make_unique<LrSchedule>(schedule);
  return InitParamStates();
}

Status Trainer::InitParamStates() {
  // ParameterStore order; distributed, a rank holds its own experts, taken from dist_->experts().
  for (Parameter& model_param : model_->parameters()) {
    Parameter* param = &model_param;
    if (dist_ && param->is_expert) {
      param = dist_->experts().Find(param->name);
      if (param == nullptr) continue;  // another rank's expert
    } else if (dist_ && dist_->zero()) {
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

std::vector<std::vector<float>> Trainer::ParameterValues() {
  std::vector<std::vector<float>> out;
  backend_->Synchronize();
  for (ParamState& s : states_) {
    const float* p = s.host_value.data<float>();
    out.emplace_back(p, p + s.host_value.numel());
  }
  return out;
}

}  // namespace sy::launcher
