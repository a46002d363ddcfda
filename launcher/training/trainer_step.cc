// Trainer::Step: one optimizer step on the next train batch, timed by phase, and the routing
// trace it records (trainer.h).
#include "launcher/training/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <vector>

#include "launcher/training/distributed_rank.h"
#include "optim/grad_clip.h"

namespace sy::launcher {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Result<StepReport> Trainer::Step() {
  Result<StepReport> report = StepOnce();
  if (report.status().code() != StatusCode::kResourceExhausted) return report;
  const std::string& message = report.status().message();
  const std::string step = "step " + std::to_string(step_ + 1) + ": ";
  // The expert store's errors carry their own fix (ExpertStateStore: a full disk).
  if (message.rfind("expert_store", 0) == 0) {
    return Status(StatusCode::kResourceExhausted, step + message);
  }
  // Every step-sized allocation scales with the tokens of a step.
  return Status(StatusCode::kResourceExhausted, step + message + "; lower data.batch_size (" +
                                                    std::to_string(config_.data.batch_size) +
                                                    ") or data.seq_len (" +
                                                    std::to_string(config_.data.seq_len) + ")");
}

// The wall time of a step by phase, each less the communication inside it (StepReport). End(p)
// charges the time since the previous End to phase p.
class StepTimer {
 public:
  enum Phase { kData, kForward, kBackward, kOptimizer, kPhases };

  explicit StepTimer(const DistributedRank* dist)
      : dist_(dist),
        start_(Clock::now()),
        last_(start_),
        comm_start_(Comm()),
        comm_last_(comm_start_) {}

  void End(Phase phase) {
    const auto now = Clock::now();
    const double comm = Comm();
    wall_[phase] += Seconds(last_, now);
    comm_[phase] += comm - comm_last_;
    last_ = now;
    comm_last_ = comm;
  }
  // The phase's time without its communication.
  double Compute(Phase phase) const { return wall_[phase] - comm_[phase]; }
  double Total() const { return Seconds(start_, Clock::now()); }
  double Communication() const { return Comm() - comm_start_; }

 private:
  double Comm() const { return dist_ ? dist_->communication_seconds() : 0.0; }

  const DistributedRank* dist_;
  Clock::time_point start_, last_;
  double comm_start_, comm_last_;
  double wall_[kPhases] = {}, comm_[kPhases] = {};
};

int64_t Trainer::CountTargets(const Tensor& targets) {
  const int32_t* t = targets.data<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < targets.numel(); ++i) n += t[i] >= 0 ? 1 : 0;
  return n;
}

Status Trainer::ForwardBackward(float loss_scale, LossReport* loss, StepTimer& timer) {
  const int64_t micro = config_.train.micro_batches;
  const int num_moe = model_->config().NumMoeLayers();
  step_expert_load_.assign(static_cast<size_t>(num_moe),
                           std::vector<int64_t>(static_cast<size_t>(model_->config().num_experts)));
  const auto add_load = [&] {
    for (int m = 0; m < num_moe; ++m) {
      const std::vector<int64_t>& routed = model_->moe_layer(m).plan().routed;
      for (size_t e = 0; e < routed.size(); ++e) step_expert_load_[m][e] += routed[e];
    }
  };
  const bool trace = !config_.log.routing_trace.empty();
  if (micro == 1 && loss_scale == 1.0f) {
    // One pass over the batch, its loss the mean over its targets (or the per-task weights).
    SY_ASSIGN_OR_RETURN(*loss, model_->Forward(batch_.tokens, batch_.targets, row_weights_));
    backend_->Synchronize();
    add_load();
    if (trace) RecordRouting(batch_.batch_size() * batch_.seq_len());
    timer.End(StepTimer::kForward);
    SY_RETURN_IF_ERROR(model_->Backward());
    timer.End(StepTimer::kBackward);
    return Status::Ok();
  }
  // Micro-batches, or a scaled loss (Note [micro-batches] in trainer.h): each row's cross-entropy
  // weighted so that the passes' sum is the batch's loss (the mean over this rank's targets)
  // times loss_scale, and each pass's router losses weighted by loss_scale / micro.
  const int64_t rows = batch_.batch_size(), per = rows / micro;
  if (per * micro != rows) {
    return InvalidArgumentError("step " + std::to_string(step_ + 1) + ": 'train.micro_batches' " +
                                std::to_string(micro) + " does not divide this rank's " +
                                std::to_string(rows) +
                                " rows; choose task batch sizes that it divides");
  }
  std::vector<float> weights = row_weights_;
  if (weights.empty()) {
    const int64_t targets = CountTargets(batch_.targets);
    weights.assign(static_cast<size_t>(rows),
                   targets > 0 ? static_cast<float>(1.0 / static_cast<double>(targets)) : 0.0f);
  }
  for (float& w : weights) w *= loss_scale;
  model_->set_router_loss_scale(loss_scale / static_cast<float>(micro));
  *loss = LossReport{};
  loss->aux_per_moe_layer.assign(static_cast<size_t>(num_moe), 0.0f);
  loss->z_per_moe_layer.assign(static_cast<size_t>(num_moe), 0.0f);
  Status status = Status::Ok();
  for (int64_t m = 0; m < micro && status.ok(); ++m) {
    const Tensor tokens = batch_.tokens.Slice(m * per, (m + 1) * per);
    const Tensor targets = batch_.targets.Slice(m * per, (m + 1) * per);
    Result<LossReport> r =
        model_->Forward(tokens, targets, std::span<const float>(weights).subspan(m * per, per));
    if (!r.ok()) {
      status = r.status();
      break;
    }
    backend_->Synchronize();
    add_load();
    if (trace && m == 0) RecordRouting(per * batch_.seq_len());
    // The weighted cross-entropies add up to loss_scale times the batch's; the router losses are
    // the passes' mean.
    loss->ce_loss += r->ce_loss / loss_scale;
    loss->aux_loss += r->aux_loss / static_cast<float>(micro);
    loss->z_loss += r->z_loss / static_cast<float>(micro);
    loss->num_targets += r->num_targets;
    for (int l = 0; l < num_moe; ++l) {
      loss->aux_per_moe_layer[l] += r->aux_per_moe_layer[l] / static_cast<float>(micro);
      loss->z_per_moe_layer[l] += r->z_per_moe_layer[l] / static_cast<float>(micro);
    }
    timer.End(StepTimer::kForward);
    status = model_->Backward();
    timer.End(StepTimer::kBackward);
  }
  model_->set_router_loss_scale(1.0f);
  SY_RETURN_IF_ERROR(status);
  const ModelConfig& c = model_->config();
  loss->loss = loss->ce_loss + static_cast<float>(c.router_aux_loss_coef) * loss->aux_loss +
               static_cast<float>(c.router_z_loss_coef) * loss->z_loss;
  return Status::Ok();
}

Result<StepReport> Trainer::StepOnce() {
  StepTimer timer(dist_.get());
  float task_share = 1.0f;
  if (task_streams_) {
    SY_RETURN_IF_ERROR(NextTaskBatch(&row_weights_, &task_share));
  } else {
    SY_RETURN_IF_ERROR(train_batcher_->Next(&batch_));
  }
  timer.End(StepTimer::kData);
  const ExpertStoreStats store_before = expert_store_ ? expert_store_->stats() : ExpertStoreStats{};
  if (working_set_) working_set_->Clear();  // an evaluation's experts
  if (expert_store_) SY_RETURN_IF_ERROR(expert_store_->BeginStep());
  if (dist_) {
    dist_->ZeroGrads();
  } else {
    model_->ZeroGrads();
  }
  float share = 1.0f;
  if (dist_ && task_streams_) {
    share = task_share;
    dist_->SetLossShare(share);
  } else if (dist_) {
    // This rank's share of the global targets weights its loss (LossShareExpertCompute).
    SY_ASSIGN_OR_RETURN(share, dist_->ShareLoss(CountTargets(batch_.targets)));
  }
  const float loss_scale = loss_scaler_ ? loss_scaler_->scale() : 1.0f;
  LossReport loss;
  SY_RETURN_IF_ERROR(ForwardBackward(loss_scale, &loss, timer));
  if (config_.train.sim_gflops > 0) {
    // The forward and backward of this rank's tokens, modelled: 6 FLOPs per active parameter.
    const double active = static_cast<double>(num_parameters() - num_expert_parameters()) +
                          static_cast<double>(num_expert_parameters()) * model_->config().top_k /
                              std::max(1, model_->config().num_experts);
    backend_->ModelCompute(6.0 * active * static_cast<double>(batch_.batch_size()) *
                           static_cast<double>(batch_.seq_len()));
  }
  if (!host_backend() && !device_adam_) {
    for (ParamState& s : states_) {
      backend_->CopyAsync(s.param->grad, s.host_grad, backend_->compute_stream());
    }
  }
  if (working_set_) working_set_->DownloadGradients();  // a device's, for the host update
  backend_->Synchronize();
  timer.End(StepTimer::kBackward);

  StepReport report;
  report.loss_scale = loss_scaler_ ? loss_scale : 0.0f;
  const float inv_scale = loss_scaler_ ? loss_scaler_->inv_scale() : 1.0f;
  if (dist_) {
    SY_RETURN_IF_ERROR(BindReplicaUnion());
    SY_ASSIGN_OR_RETURN(GlobalStepLoss global,
                        dist_->ReduceGradients(states_, WorkingSetGradients(), loss, share,
                                               config_.train.grad_clip, inv_scale));
    report.loss = global.loss;
    report.ce_loss = global.ce_loss;
    report.aux_loss = global.aux_loss;
    report.grad_norm = global.grad_norm;
  } else {
    if (device_adam_) {
      report.grad_norm =
          device_adam_->ClipGradNorm(static_cast<float>(config_.train.grad_clip), inv_scale);
    } else {
      report.grad_norm = UnscaleAndClipGradNorm(
          ClippedGradients(), inv_scale, static_cast<float>(config_.train.grad_clip), pool_.get());
    }
    report.loss = loss.loss;
    report.ce_loss = loss.ce_loss;
    report.aux_loss = loss.aux_loss;
  }
  report.lr = schedule_->Lr(step_);
  // A non-finite gradient skips the step; with f16 the scale backs off (GradScaler's rule).
  report.skipped = !std::isfinite(report.grad_norm);
  if (loss_scaler_) loss_scaler_->Update(report.skipped);
  if (report.skipped) ++skipped_steps_;
  report.skipped_steps = skipped_steps_;
  if (!report.skipped && device_adam_) {
    device_adam_->Step(report.lr);
  } else if (!report.skipped) {
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
      // Mixed precision: the rounded update, written in the same pass.
      if (s.host_compute.defined()) g.compute = {s.host_compute.data(), s.host_compute.dtype()};
      groups.push_back(g);
    }
    optimizer_->Step(groups, report.lr);
    if (expert_store_) SY_RETURN_IF_ERROR(expert_store_->Update(report.lr));
    if (dist_ && dist_->zero()) SY_RETURN_IF_ERROR(dist_->zero()->Step(report.lr));
    if (!host_backend()) {
      for (ParamState& s : states_) {
        const Tensor& updated = s.host_compute.defined() ? s.host_compute : s.host_value;
        backend_->CopyAsync(updated, s.param->value, backend_->compute_stream());
      }
      backend_->Synchronize();
    }
  }
  if (expert_store_) {
    SY_RETURN_IF_ERROR(expert_store_->EndStep());
    if (working_set_) {
      report.expert_working_set_bytes = working_set_->bytes();
      report.expert_replica_gradients = working_set_->gradient_only();
      working_set_->Clear();
    }
    const ExpertStoreStats after = expert_store_->stats();
    report.has_expert_store = true;
    // The store's reads in a step may exceed its accesses (the look-ahead reads the next
    // step's experts), so the step's hits are its accesses less its reads, at least 0.
    const uint64_t accesses =
        (after.hits + after.misses) - (store_before.hits + store_before.misses);
    report.expert_cache_misses = after.misses - store_before.misses;
    report.expert_cache_hits =
        accesses > report.expert_cache_misses ? accesses - report.expert_cache_misses : 0;
    report.expert_prefetched = after.prefetched - store_before.prefetched;
    report.store_bytes_read = after.bytes_read - store_before.bytes_read;
    report.store_bytes_written = after.bytes_written - store_before.bytes_written;
    report.expert_wait_seconds = after.wait_seconds - store_before.wait_seconds;
    report.store_read_seconds = after.read_seconds - store_before.read_seconds;
    report.store_read_exposed_seconds =
        after.read_exposed_seconds - store_before.read_exposed_seconds;
    report.store_write_seconds = after.write_seconds - store_before.write_seconds;
    report.store_update_seconds = after.update_seconds - store_before.update_seconds;
    report.store_end_step_seconds = after.end_step_seconds - store_before.end_step_seconds;
    report.prefetch_failed = after.prefetch_failed - store_before.prefetch_failed;
  }
  timer.End(StepTimer::kOptimizer);
  ++step_;
  report.expert_load = step_expert_load_;
  // The global load: every rank's routing, summed.
  if (dist_) SY_RETURN_IF_ERROR(dist_->SumOverWorld(report.expert_load));
  model_->ReleaseActivations();
  report.step = step_;
  report.tokens = batch_.batch_size() * batch_.seq_len() * world_size();
  if (task_streams_) {
    int64_t rows = 0;
    for (int64_t n : task_streams_->rows()) rows += n;
    report.tokens = rows * batch_.seq_len();
  }
  report.seconds = timer.Total();
  report.data_seconds = timer.Compute(StepTimer::kData);
  report.forward_seconds = timer.Compute(StepTimer::kForward);
  report.backward_seconds = timer.Compute(StepTimer::kBackward);
  report.optimizer_seconds = timer.Compute(StepTimer::kOptimizer);
  report.communication_seconds = timer.Communication();
  if (task_streams_) SY_RETURN_IF_ERROR(EndTaskStep(&report));
  return report;
}

void Trainer::RecordRouting(int64_t forward_tokens) {
  const int moe_layers = model_->config().NumMoeLayers();
  if (moe_layers == 0) return;
  trace_.num_layers = static_cast<uint32_t>(moe_layers);
  trace_.num_experts = static_cast<uint32_t>(model_->config().num_experts);
  const uint32_t first_step = trace_.num_steps();
  // experts[layer][token]: the experts token `token` was routed to in `layer`, in expert order.
  const int64_t tokens = std::min<int64_t>(config_.log.routing_trace_tokens, forward_tokens);
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

}  // namespace sy::launcher
