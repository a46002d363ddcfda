// Trainer::SaveCheckpoint / LoadCheckpoint: the trainer's state to and from a TrainCheckpoint
// (train_checkpoint.h is the file). A distributed save streams the one-process layout from rank 0:
// each expert tensor sent by its owner in the first EP group as the writer reaches it, ZeRO-3's
// dense values and optimizer shards gathered, the partitioned embedding's columns joined. A
// distributed load reads the file on rank 0, broadcasts the dense parameters and sends each
// expert tensor to the ranks that hold it, one at a time; each rank keeps its part.
#include "launcher/training/trainer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "launcher/training/distributed_rank.h"
#include "launcher/training/rank_collectives.h"
#include "parallel/embedding_partition.h"
#include "parallel/expert_parallel_compute.h"
#include "parallel/zero3.h"
#include "runtime/model/host_transfer.h"

namespace sy::launcher {
namespace {

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

}  // namespace

Status Trainer::SaveCheckpoint(const std::string& path) {
  // With an expert store the experts' states are consolidated into the file an in-memory run
  // writes; their moments are held only for the save. A rank whose store fails returns here, and
  // RunTrainingJob ends the job on every rank.
  if (working_set_ && !dist_) return SaveWorkingSetCheckpoint(path);
  // Distributed, the experts' states stream to rank 0 from their owners (and from the store one
  // expert at a time): a failed consolidation still joins the save's collectives and returns.
  if (dist_) {
    return SaveDistributedCheckpoint(path,
                                     expert_store_ ? expert_store_->Consolidate() : Status::Ok());
  }
  if (device_adam_) device_adam_->SyncToHost();
  return SaveCheckpointOfStates(path);
}

TrainCheckpoint Trainer::CheckpointHeader() {
  TrainCheckpoint ckpt;
  ckpt.config_json = config_.effective_json;
  ckpt.step = step_;
  ckpt.seed = config_.train.seed;
  ckpt.data_position =
      task_streams_ ? task_streams_->SavePosition() : train_batcher_->SavePosition();
  if (loss_scaler_) {
    ckpt.loss_scale = loss_scaler_->state().scale;
    ckpt.loss_scale_growth_tracker = loss_scaler_->state().growth_tracker;
  }
  return ckpt;
}

Status Trainer::SaveCheckpointOfStates(const std::string& path) {
  TrainCheckpoint ckpt = CheckpointHeader();
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

namespace {

constexpr const char* kExpertParts[] = {"w_gate", "w_up", "w_down"};

}  // namespace

Status Trainer::SaveWorkingSetCheckpoint(const std::string& path) {
  // The experts are brought up to date and written back, then streamed from the store into the
  // file one expert at a time, between the dense parameters, in the order an in-memory run
  // writes them.
  SY_RETURN_IF_ERROR(expert_store_->Consolidate());
  const TrainCheckpoint header = CheckpointHeader();
  size_t next_state = 0;
  ExportedExpert exported;
  auto next = [&](size_t i, CheckpointParam* out) -> Status {
    const ParamInfo& p = all_params_[i];
    out->value.name = out->m.name = out->v.name = p.name;
    out->value.shape = out->m.shape = out->v.shape = p.shape;
    if (!p.is_expert) {
      SY_CHECK_LT(next_state, states_.size()) << "dense parameters";
      const ParamState& s = states_[next_state++];
      SY_CHECK_EQ(s.param->name, p.name) << "dense parameter order";
      const float* data = s.host_value.data<float>();
      out->value.data.assign(data, data + s.host_value.numel());
      out->m.data = s.m;
      out->v.data = s.v;
      out->opt_step = s.opt_step;
      return Status::Ok();
    }
    return OwnExpertState(i, &exported, out);
  };
  return WriteTrainCheckpointStreamed(path, header, all_params_.size(), next);
}

Status Trainer::RestoreWorkingSetExperts(const std::string& path, const TrainCheckpoint& ckpt) {
  // The run has made as many updates as its most updated parameter (every dense one is updated
  // at every update).
  int64_t updates = 0;
  for (int64_t s : ckpt.optimizer_steps) updates = std::max(updates, s);
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < all_params_.size(); ++i) index[all_params_[i].name] = i;
  SY_ASSIGN_OR_RETURN(std::unique_ptr<TrainCheckpointReader> reader,
                      TrainCheckpointReader::Open(path));
  const bool with_m = optimizer_->NeedsFirstMoment(), with_v = optimizer_->NeedsSecondMoment();
  std::vector<std::vector<float>> values, m, v;
  CheckpointParam param;
  for (size_t e = 0; e < expert_store_->entries().size(); ++e) {
    const ExpertEntry& entry = expert_store_->entries()[e];
    const size_t parts = entry.parts.size();
    values.assign(parts, {});
    m.assign(parts, {});
    v.assign(parts, {});
    int64_t opt_step = 0;
    for (size_t k = 0; k < parts; ++k) {
      const size_t i =
          index.at(ExpertParameterName(entry.decoder_layer, entry.expert, kExpertParts[k]));
      SY_RETURN_IF_ERROR(
          reader->Read(all_params_[i].name, all_params_[i].shape, with_m, with_v, &param));
      values[k] = std::move(param.value.data);
      m[k] = std::move(param.m.data);
      v[k] = std::move(param.v.data);
      opt_step = ckpt.optimizer_steps[i];
    }
    SY_RETURN_IF_ERROR(expert_store_->Import(e, &values, m, v, opt_step, updates));
  }
  return expert_store_->Consolidate();
}

namespace {

// The distributed save's point-to-point messages (world communicator), per expert tensor in
// checkpoint order, from its owner in the first EP group to rank 0: a header {StatusCode::kOk,
// optimizer step} followed by the value, then m and v where the optimizer keeps them; or the
// header {the failure's code, 0} alone when the owner could not read the expert's state (it
// returns its own error, naming the expert and the file).
constexpr int kExpertHeaderTag = 7101;
constexpr int kExpertStateTag = 7102;

}  // namespace

Status Trainer::OwnExpertState(size_t i, ExportedExpert* exported, CheckpointParam* out) {
  const ParamInfo& p = all_params_[i];
  if (working_set_) {
    // The value too comes from the store (the model holds no expert), read once for the parts.
    const size_t e = expert_store_->Entry(p.layer, p.expert);
    if (exported->entry != e) {
      exported->entry = SIZE_MAX;
      SY_RETURN_IF_ERROR(expert_store_->Export(e, &exported->values, &exported->m, &exported->v,
                                               &exported->opt_step));
      exported->entry = e;
    }
    const size_t k = static_cast<size_t>(p.expert_part);
    SY_CHECK(k < exported->values.size() && k < exported->m.size() && k < exported->v.size())
        << p.name << " is not a part of its store entry";
    out->value.data = std::move(exported->values[k]);
    out->m.data = std::move(exported->m[k]);
    out->v.data = std::move(exported->v[k]);
    out->opt_step = exported->opt_step;
    return Status::Ok();
  }
  const auto held = state_of_.find(p.name);
  SY_CHECK(held != state_of_.end()) << p.name << " is not held by rank " << rank();
  const ParamState& s = states_[held->second];
  const float* data = s.host_value.data<float>();
  out->value.data.assign(data, data + s.host_value.numel());
  const bool with_m = optimizer_->NeedsFirstMoment(), with_v = optimizer_->NeedsSecondMoment();
  out->m.data = with_m ? s.m : std::vector<float>();
  out->v.data = with_v ? s.v : std::vector<float>();
  out->opt_step = s.opt_step;
  return Status::Ok();
}

Status Trainer::SendOwnExpertStates(Communicator& world, Status failed) {
  const bool with_m = optimizer_->NeedsFirstMoment(), with_v = optimizer_->NeedsSecondMoment();
  ExportedExpert exported;
  CheckpointParam param;
  for (size_t i = 0; i < all_params_.size(); ++i) {
    const ParamInfo& p = all_params_[i];
    if (!p.is_expert ||
        ExpertOwner(p.expert, config_.model.num_experts, dist_->ep_size()) != rank()) {
      continue;
    }
    if (failed.ok()) failed = OwnExpertState(i, &exported, &param);
    const int64_t header[2] = {static_cast<int64_t>(failed.code()),
                               failed.ok() ? param.opt_step : 0};
    SY_RETURN_IF_ERROR(world.Send(header, 2, DType::kI64, 0, kExpertHeaderTag));
    if (!failed.ok()) continue;
    const size_t n = static_cast<size_t>(p.numel);
    SY_CHECK_EQ(param.value.data.size(), n) << p.name;
    SY_RETURN_IF_ERROR(world.Send(param.value.data.data(), n, DType::kF32, 0, kExpertStateTag));
    for (const auto& [kept, moment] : {std::pair{with_m, &param.m}, std::pair{with_v, &param.v}}) {
      if (!kept) continue;
      SY_CHECK_EQ(moment->data.size(), n) << "optimizer state of " << p.name;
      SY_RETURN_IF_ERROR(world.Send(moment->data.data(), n, DType::kF32, 0, kExpertStateTag));
    }
  }
  return failed;
}

Status Trainer::ReceiveExpertState(Communicator& world, size_t i, CheckpointParam* out,
                                   Status* sent) {
  const ParamInfo& p = all_params_[i];
  const int owner = ExpertOwner(p.expert, config_.model.num_experts, dist_->ep_size());
  int64_t header[2] = {0, 0};
  SY_RETURN_IF_ERROR(world.Recv(header, 2, DType::kI64, owner, kExpertHeaderTag));
  *sent = Status::Ok();
  if (header[0] != static_cast<int64_t>(StatusCode::kOk)) {
    const auto code = static_cast<StatusCode>(header[0]);
    *sent =
        Status(code, "checkpoint: rank " + std::to_string(owner) + " could not read the state of " +
                         p.name + " for the save; its own error names the cause");
    return Status::Ok();
  }
  out->opt_step = header[1];
  const bool with_m = optimizer_->NeedsFirstMoment(), with_v = optimizer_->NeedsSecondMoment();
  const size_t n = static_cast<size_t>(p.numel);
  for (const auto& [kept, tensor] :
       {std::pair{true, &out->value}, std::pair{with_m, &out->m}, std::pair{with_v, &out->v}}) {
    tensor->data.resize(kept ? n : 0);
    if (!kept) continue;
    SY_RETURN_IF_ERROR(world.Recv(tensor->data.data(), n, DType::kF32, owner, kExpertStateTag));
  }
  return Status::Ok();
}

Status Trainer::SaveDistributedCheckpoint(const std::string& path, Status consolidated) {
  // Rank 0 writes the file as WriteTrainCheckpointStreamed writes it, one parameter at a time:
  // each expert tensor comes from its owner in the first EP group (world ranks 0 .. ep_size-1,
  // EP rank = world rank) by a point-to-point message as the writer reaches it, so no rank ever
  // holds more than one expert's states beyond its own training state.
  DistributedRank& d = *dist_;
  Communicator& world = d.world();
  backend_->Synchronize();
  // Under ZeRO-3 the dense values are gathered into the model's tensors for the save, and the
  // dense optimizer state comes from the shards.
  std::unordered_map<std::string, DenseOptimizerState> dense_state;
  Zero3* zero = d.zero();
  if (zero) {
    SY_RETURN_IF_ERROR(zero->GatherFullParameters());
    SY_ASSIGN_OR_RETURN(std::vector<DenseOptimizerState> states, zero->GatherOptimizerState());
    for (DenseOptimizerState& st : states) dense_state[st.name] = std::move(st);
  }
  // Column shards (the partitioned embedding): the whole [rows, full_cols] value, m and v,
  // gathered from every rank's columns onto every rank (the file has the one-process layout).
  std::unordered_map<size_t, std::vector<float>> full_value, full_m, full_v;
  for (size_t i = 0; i < states_.size(); ++i) {
    const ParamState& s = states_[i];
    if (!s.param->is_column_shard()) continue;
    const int64_t rows = s.param->value.dim(0), full = s.param->full_cols;
    const float* data = s.host_value.data<float>();
    const std::vector<float> mine(data, data + s.host_value.numel());
    SY_ASSIGN_OR_RETURN(full_value[i], GatherColumnShards(world, rows, full, mine));
    if (!s.m.empty()) {
      SY_ASSIGN_OR_RETURN(full_m[i], GatherColumnShards(world, rows, full, s.m));
    }
    if (!s.v.empty()) {
      SY_ASSIGN_OR_RETURN(full_v[i], GatherColumnShards(world, rows, full, s.v));
    }
  }
  Status mine = consolidated;  // this rank's own failure, returned whatever rank 0 says
  Status written = Status::Ok();
  if (is_root()) {
    ExportedExpert exported;
    size_t consumed = 0;  // parameters whose messages `next` has taken
    auto next = [&](size_t i, CheckpointParam* out) -> Status {
      const ParamInfo& p = all_params_[i];
      out->value.name = out->m.name = out->v.name = p.name;
      out->value.shape = out->m.shape = out->v.shape = p.shape;
      consumed = i + 1;
      if (p.is_expert) {
        if (ExpertOwner(p.expert, config_.model.num_experts, d.ep_size()) != 0) {
          Status sent;
          SY_RETURN_IF_ERROR(ReceiveExpertState(world, i, out, &sent));
          return sent;
        }
        Status own = OwnExpertState(i, &exported, out);
        if (!own.ok()) mine = own;
        return own;
      }
      const size_t n = static_cast<size_t>(p.numel);
      if (zero) {
        DenseOptimizerState& st = dense_state.at(p.name);
        if (config_.train.precision != Precision::kF32) {
          out->value.data = std::move(st.master);  // the f32 masters, not the 16-bit values
        } else {
          // The gathered full values.
          SY_ASSIGN_OR_RETURN(out->value.data,
                              DownloadF32(*backend_, model_->parameters().Find(p.name)->value));
        }
        out->m.data = std::move(st.m);
        out->v.data = std::move(st.v);
        out->opt_step = st.step;
        return Status::Ok();
      }
      const size_t i_state = state_of_.at(p.name);
      const ParamState& s = states_[i_state];
      if (full_value.count(i_state)) {
        out->value.data = std::move(full_value[i_state]);
      } else {
        const float* data = s.host_value.data<float>();
        out->value.data.assign(data, data + n);
      }
      out->m.data = full_m.count(i_state) ? std::move(full_m[i_state]) : s.m;
      out->v.data = full_v.count(i_state) ? std::move(full_v[i_state]) : s.v;
      out->opt_step = s.opt_step;
      return Status::Ok();
    };
    written = consolidated.ok()
                  ? WriteTrainCheckpointStreamed(path, CheckpointHeader(), all_params_.size(), next)
                  : consolidated;
    // A save abandoned part way still takes every message the owners send, so none of them
    // waits for rank 0 (each returns its own status below).
    CheckpointParam discarded;
    for (size_t i = consumed; i < all_params_.size(); ++i) {
      const ParamInfo& p = all_params_[i];
      if (!p.is_expert || ExpertOwner(p.expert, config_.model.num_experts, d.ep_size()) == 0) {
        continue;
      }
      Status sent;  // an owner's failure is returned by the owner
      SY_RETURN_IF_ERROR(ReceiveExpertState(world, i, &discarded, &sent));
    }
  } else if (rank() < d.ep_size()) {
    mine = SendOwnExpertStates(world, consolidated);
  }
  if (zero) zero->ReleaseFullParameters();
  const Status agreed = BroadcastStatus(world, written);
  return mine.ok() ? agreed : mine;
}

void Trainer::NoteResumedPrecision(const std::string& path, const std::string& saved_json) const {
  const nlohmann::json saved = nlohmann::json::parse(saved_json, nullptr, false);
  // Checkpoints older than train.precision were f32 runs.
  std::string was = "f32";
  if (saved.is_object() && saved.contains("train") && saved["train"].is_object() &&
      saved["train"].contains("precision") && saved["train"]["precision"].is_string()) {
    was = saved["train"]["precision"].get<std::string>();
  }
  const std::string now(PrecisionName(config_.train.precision));
  if (was == now) return;
  spdlog::info(
      "checkpoint {} was trained in {}; resuming in {}: its f32 master weights and optimizer "
      "moments carry over exactly, the compute copy is {}{}",
      path, was, now, now == "f32" ? "the masters themselves" : "their rounding to " + now,
      config_.train.precision == Precision::kF16 ? ", and the loss scale starts afresh" : "");
}

Status Trainer::CheckCheckpointConfig(const std::string& path, const std::string& saved_json) {
  nlohmann::json saved = nlohmann::json::parse(saved_json, nullptr, false);
  nlohmann::json ours = nlohmann::json::parse(config_.effective_json, nullptr, false);
  if (saved.is_discarded() || !saved.is_object()) {
    return DataLossError("checkpoint " + path + ": its config is not valid JSON");
  }
  // Checkpoints older than per-task batches lack their keys; left at 0 they change nothing.
  if (ours.contains("data") && ours["data"].contains("tasks") && saved.contains("data") &&
      saved["data"].is_object()) {
    const nlohmann::json saved_tasks = saved["data"].value("tasks", nlohmann::json::object());
    for (auto& [task, fields] : ours["data"]["tasks"].items()) {
      const nlohmann::json saved_fields = saved_tasks.value(task, nlohmann::json::object());
      for (const char* key : {"batch_size", "grow_at_step", "grow_batch_size"}) {
        if (fields.contains(key) && fields[key] == 0 && saved_fields.is_object() &&
            !saved_fields.contains(key)) {
          fields.erase(key);
        }
      }
    }
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
  NoteResumedPrecision(path, saved_config);
  // Every parameter of the model (distributed: every expert too, as the file holds them).
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const ParamInfo& p : all_params_) {
    names.push_back(p.name);
    shapes.push_back(p.shape);
  }
  // The experts are read one at a time afterwards: the working set's into the store
  // (RestoreWorkingSetExperts), a distributed run's sent to their owners (DistributeExperts).
  std::function<bool(size_t)> skip;
  if (working_set_ || dist_) skip = [this](size_t i) { return all_params_[i].is_expert; };
  SY_ASSIGN_OR_RETURN(*ckpt,
                      ReadTrainCheckpoint(path, names, shapes, optimizer_->NeedsFirstMoment(),
                                          optimizer_->NeedsSecondMoment(), {}, skip));
  return Status::Ok();
}

Status Trainer::LoadCheckpoint(const std::string& path) {
  TrainCheckpoint ckpt;
  if (!dist_) {
    SY_RETURN_IF_ERROR(LoadCheckpointOnRoot(path, &ckpt));
    SY_RETURN_IF_ERROR(RestoreState(ckpt));
    return working_set_ ? RestoreWorkingSetExperts(path, ckpt) : Status::Ok();
  }
  Communicator& world = dist_->world();
  Status read = is_root() ? LoadCheckpointOnRoot(path, &ckpt) : Status::Ok();
  std::unique_ptr<TrainCheckpointReader> reader;
  if (is_root() && read.ok()) {
    Result<std::unique_ptr<TrainCheckpointReader>> opened = TrainCheckpointReader::Open(path);
    if (opened.ok()) {
      reader = std::move(*opened);
    } else {
      read = opened.status();
    }
  }
  SY_RETURN_IF_ERROR(BroadcastStatus(world, read));
  // Rank 0's dense parameters, packed (values, then m and v, per parameter in ParameterStore
  // order); the experts follow one tensor at a time (DistributeExperts).
  std::vector<float> packed;
  std::vector<uint8_t> position(ckpt.data_position.begin(), ckpt.data_position.end());
  std::vector<int64_t> step_and_steps = {ckpt.step};
  if (is_root()) {
    for (size_t i = 0; i < ckpt.params.size(); ++i) {
      if (all_params_[i].is_expert) continue;
      for (const std::vector<float>* part :
           {&ckpt.params[i].data, &ckpt.optimizer_m[i].data, &ckpt.optimizer_v[i].data}) {
        packed.insert(packed.end(), part->begin(), part->end());
      }
    }
    step_and_steps.insert(step_and_steps.end(), ckpt.optimizer_steps.begin(),
                          ckpt.optimizer_steps.end());
    // The loss scaler's state last (f16; scale 0 when the file has none).
    step_and_steps.push_back(std::bit_cast<uint32_t>(ckpt.loss_scale));
    step_and_steps.push_back(ckpt.loss_scale_growth_tracker);
  }
  SY_RETURN_IF_ERROR(BroadcastVector(world, packed));
  SY_RETURN_IF_ERROR(BroadcastVector(world, position));
  SY_RETURN_IF_ERROR(BroadcastVector(world, step_and_steps));
  if (!is_root()) {
    SY_CHECK_GE(step_and_steps.size(), 3u) << "broadcast checkpoint header is short";
    ckpt.step = step_and_steps[0];
    ckpt.optimizer_steps.assign(step_and_steps.begin() + 1, step_and_steps.end() - 2);
    ckpt.loss_scale =
        std::bit_cast<float>(static_cast<uint32_t>(step_and_steps[step_and_steps.size() - 2]));
    ckpt.loss_scale_growth_tracker = step_and_steps.back();
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
      const size_t n = p.is_expert ? 0 : static_cast<size_t>(p.numel);
      const std::vector<int64_t>& shape = p.shape;
      ckpt.params.push_back({p.name, shape, take(n)});
      ckpt.optimizer_m.push_back({p.name, shape, with_m ? take(n) : std::vector<float>()});
      ckpt.optimizer_v.push_back({p.name, shape, with_v ? take(n) : std::vector<float>()});
    }
  }
  std::vector<float>().swap(packed);
  SY_RETURN_IF_ERROR(DistributeExperts(world, reader.get(), &ckpt));
  return RestoreState(ckpt);
}

Status Trainer::DistributeExperts(Communicator& world, const TrainCheckpointReader* reader,
                                  TrainCheckpoint* ckpt) {
  // Per expert tensor in checkpoint order, rank 0 reads it and sends it to every rank that holds
  // the expert (its owner's EP rank in each EP group), as the save's messages: a header {status
  // code, 0}, then the value, m and v when the code is kOk. After a failed read rank 0 sends only
  // failure headers; every rank then returns rank 0's error, its state untouched.
  const bool with_m = optimizer_->NeedsFirstMoment(), with_v = optimizer_->NeedsSecondMoment();
  const int ep = dist_->ep_size(), groups = world_size() / ep;
  Status failed = Status::Ok();  // rank 0's read or import
  Status mine = Status::Ok();    // another rank's import
  CheckpointParam param;
  // The working set's experts go into the store as each one's last part arrives, and leave ckpt
  // (RestoreState restores dense parameters only then). The run has made as many updates as its
  // most updated parameter (every dense one is updated at every update).
  int64_t updates = 0;
  for (int64_t s : ckpt->optimizer_steps) updates = std::max(updates, s);
  std::vector<std::vector<float>> values, m, v;
  auto import = [&](size_t i) -> Status {
    const ParamInfo& p = all_params_[i];
    if (!working_set_ || !failed.ok() || !mine.ok() || p.expert_part != 2) return Status::Ok();
    values.assign(3, {});
    m.assign(3, {});
    v.assign(3, {});
    for (size_t k = 0; k < 3; ++k) {
      const size_t part = i - 2 + k;
      SY_CHECK(all_params_[part].is_expert && all_params_[part].expert == p.expert &&
               all_params_[part].expert_part == static_cast<int>(k))
          << p.name << ": expert parts out of order";
      values[k] = std::move(ckpt->params[part].data);
      m[k] = std::move(ckpt->optimizer_m[part].data);
      v[k] = std::move(ckpt->optimizer_v[part].data);
    }
    return expert_store_->Import(expert_store_->Entry(p.layer, p.expert), &values, m, v,
                                 ckpt->optimizer_steps[i], updates);
  };
  for (size_t i = 0; i < all_params_.size(); ++i) {
    const ParamInfo& p = all_params_[i];
    if (!p.is_expert) continue;
    const int owner = ExpertOwner(p.expert, config_.model.num_experts, ep);
    auto tensors = [&](CheckpointParam& c) {
      return std::array{std::pair{true, &c.value.data}, std::pair{with_m, &c.m.data},
                        std::pair{with_v, &c.v.data}};
    };
    if (is_root()) {
      if (failed.ok()) failed = reader->Read(p.name, p.shape, with_m, with_v, &param);
      const int64_t header[2] = {static_cast<int64_t>(failed.code()), 0};
      for (int g = 0; g < groups; ++g) {
        const int holder = g * ep + owner;
        if (holder == 0) continue;
        SY_RETURN_IF_ERROR(world.Send(header, 2, DType::kI64, holder, kExpertHeaderTag));
        if (!failed.ok()) continue;
        for (const auto& [kept, data] : tensors(param)) {
          if (kept) {
            SY_RETURN_IF_ERROR(
                world.Send(data->data(), data->size(), DType::kF32, holder, kExpertStateTag));
          }
        }
      }
      if (failed.ok() && owner == 0) {
        ckpt->params[i].data = std::move(param.value.data);
        ckpt->optimizer_m[i].data = std::move(param.m.data);
        ckpt->optimizer_v[i].data = std::move(param.v.data);
        if (Status imported = import(i); !imported.ok()) failed = imported;
      }
      continue;
    }
    if (rank() % ep != owner) continue;
    int64_t header[2] = {0, 0};
    SY_RETURN_IF_ERROR(world.Recv(header, 2, DType::kI64, 0, kExpertHeaderTag));
    if (header[0] != static_cast<int64_t>(StatusCode::kOk)) continue;  // rank 0 says why, below
    param.value.data.resize(static_cast<size_t>(p.numel));
    param.m.data.resize(with_m ? static_cast<size_t>(p.numel) : 0);
    param.v.data.resize(with_v ? static_cast<size_t>(p.numel) : 0);
    for (const auto& [kept, data] : tensors(param)) {
      if (kept) {
        SY_RETURN_IF_ERROR(world.Recv(data->data(), data->size(), DType::kF32, 0, kExpertStateTag));
      }
    }
    ckpt->params[i].data = std::move(param.value.data);
    ckpt->optimizer_m[i].data = std::move(param.m.data);
    ckpt->optimizer_v[i].data = std::move(param.v.data);
    if (Status imported = import(i); !imported.ok() && mine.ok()) mine = imported;
  }
  SY_RETURN_IF_ERROR(BroadcastStatus(world, failed));
  if (!working_set_) return Status::Ok();
  // A store that failed on any rank fails the load on every rank (its own error names the expert
  // and the file), so that none trains on alone.
  if (mine.ok()) mine = expert_store_->Consolidate();
  int64_t failures = mine.ok() ? 0 : 1;
  SY_RETURN_IF_ERROR(
      world.AllReduceInPlace<int64_t>(std::span<int64_t>(&failures, 1), Reduction::kSum));
  if (!mine.ok()) return mine;
  if (failures > 0) {
    return Status(StatusCode::kFailedPrecondition,
                  "checkpoint: " + std::to_string(failures) + " other rank" +
                      (failures == 1 ? "" : "s") +
                      " could not write the restored experts into the expert store; their own "
                      "errors name the expert and the file");
  }
  return Status::Ok();
}

Status Trainer::RestoreState(TrainCheckpoint& ckpt) {
  SY_CHECK_EQ(ckpt.params.size(), ckpt.optimizer_steps.size()) << "checkpoint step counts";
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < ckpt.params.size(); ++i) index[ckpt.params[i].name] = i;
  // Everything is read and checked; only now does the trainer's state change.
  if (task_streams_) {
    SY_RETURN_IF_ERROR(task_streams_->RestorePosition(ckpt.data_position));
    // The tasks' rows at the resumed step decide the placement, whatever the saving run's world.
    SY_RETURN_IF_ERROR(PlaceTasks());
  } else {
    SY_RETURN_IF_ERROR(train_batcher_->RestorePosition(ckpt.data_position));
  }
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
    if (s.param->value.dtype() != DType::kF32) {
      // Mixed precision: the compute copy is the masters' rounding, as the optimizer writes it
      // (DeviceAdam's device master comes from host_value below).
      SY_RETURN_IF_ERROR(CopyFromHost(*backend_, ckpt.params[i].data, s.param->value));
    } else if (!host_backend()) {
      backend_->CopyAsync(s.host_value, s.param->value, backend_->compute_stream());
    }
  }
  backend_->Synchronize();
  if (loss_scaler_ && ckpt.loss_scale > 0) {
    SY_RETURN_IF_ERROR(loss_scaler_->Restore({ckpt.loss_scale, ckpt.loss_scale_growth_tracker}));
  }
  if (device_adam_) device_adam_->SyncToDevice();
  if (dist_ && dist_->zero()) {
    // The dense values go into the model's tensors (every rank the same), from which each rank
    // takes its shard; likewise the optimizer state. The tensors hold memory only while gathered.
    // Mixed precision: the shards take the f32 masters from the file directly.
    const bool mixed = config_.train.precision != Precision::kF32;
    if (!mixed) SY_RETURN_IF_ERROR(dist_->zero()->GatherFullParameters());
    std::vector<DenseOptimizerState> states;
    for (Parameter& p : model_->parameters()) {
      if (p.is_expert) continue;
      const size_t i = index.at(p.name);
      if (!mixed) SY_RETURN_IF_ERROR(CopyFromHost(*backend_, ckpt.params[i].data, p.value));
      states.push_back({p.name, std::move(ckpt.optimizer_m[i].data),
                        std::move(ckpt.optimizer_v[i].data), ckpt.optimizer_steps[i]});
    }
    if (mixed) {
      SY_RETURN_IF_ERROR(dist_->zero()->LoadMasters(
          [&](const Parameter& p) { return ckpt.params[index.at(p.name)].data; }));
    } else {
      SY_RETURN_IF_ERROR(dist_->zero()->LoadFullParameters());
    }
    SY_RETURN_IF_ERROR(dist_->zero()->LoadOptimizerState(states));
  }
  step_ = ckpt.step;
  return Status::Ok();
}

}  // namespace sy::launcher
