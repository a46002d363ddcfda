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

Result<StepReport> Trainer::StepOnce() {
  // Communication time is read at each phase boundary and taken out of that phase.
  auto comm = [this] { return dist_ ? dist_->communication_seconds() : 0.0; };
  const double comm_start = comm();
  const auto start = Clock::now();
  float task_share = 1.0f;
  if (task_streams_) {
    SY_RETURN_IF_ERROR(NextTaskBatch(&row_weights_, &task_share));
  } else {
    SY_RETURN_IF_ERROR(train_batcher_->Next(&batch_));
  }
  const auto data_done = Clock::now();
  const double comm_data = comm();
  const ExpertStoreStats store_before = expert_store_ ? expert_store_->stats() : ExpertStoreStats{};
  if (working_set_) working_set_->Clear();  // an evaluation's experts
  if (expert_store_) SY_RETURN_IF_ERROR(expert_store_->BeginStep());
  if (dist_) {
    dist_->ZeroGrads();
  } else {
    model_->ZeroGrads();
  }
  SY_ASSIGN_OR_RETURN(LossReport loss,
                      model_->Forward(batch_.tokens, batch_.targets, row_weights_));
  backend_->Synchronize();
  float share = 1.0f;
  if (dist_ && task_streams_) {
    share = task_share;
    dist_->SetLossShare(share);
  } else if (dist_) {
    // This rank's share of the global targets weights its loss (LossShareExpertCompute).
    SY_ASSIGN_OR_RETURN(share, dist_->ShareLoss(loss.num_targets));
  }
  const auto forward_done = Clock::now();
  const double comm_forward = comm();
  SY_RETURN_IF_ERROR(model_->Backward());
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
  const auto backward_done = Clock::now();
  const double comm_backward = comm();

  StepReport report;
  if (dist_) {
    SY_RETURN_IF_ERROR(BindReplicaUnion());
    SY_ASSIGN_OR_RETURN(GlobalStepLoss global,
                        dist_->ReduceGradients(states_, WorkingSetGradients(), loss, share,
                                               config_.train.grad_clip));
    report.loss = global.loss;
    report.ce_loss = global.ce_loss;
    report.aux_loss = global.aux_loss;
    report.grad_norm = global.grad_norm;
  } else {
    if (device_adam_) {
      report.grad_norm = device_adam_->ClipGradNorm(static_cast<float>(config_.train.grad_clip));
    } else {
      const std::vector<std::span<float>> grads = ClippedGradients();
      report.grad_norm =
          config_.train.grad_clip > 0
              ? ClipGradNorm(grads, static_cast<float>(config_.train.grad_clip), pool_.get())
              : GlobalGradNorm(grads, pool_.get());
    }
    report.loss = loss.loss;
    report.ce_loss = loss.ce_loss;
    report.aux_loss = loss.aux_loss;
  }
  report.lr = schedule_->Lr(step_);
  report.skipped = !std::isfinite(report.grad_norm);
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
      groups.push_back(g);
    }
    optimizer_->Step(groups, report.lr);
    if (expert_store_) SY_RETURN_IF_ERROR(expert_store_->Update(report.lr));
    if (dist_ && dist_->zero()) SY_RETURN_IF_ERROR(dist_->zero()->Step(report.lr));
    if (!host_backend()) {
      for (ParamState& s : states_) {
        backend_->CopyAsync(s.host_value, s.param->value, backend_->compute_stream());
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
  const auto optimizer_done = Clock::now();
  const double comm_optimizer = comm();
  if (!config_.log.routing_trace.empty()) RecordRouting();
  ++step_;
  for (int m = 0; m < model_->config().NumMoeLayers(); ++m) {
    report.expert_load.push_back(model_->moe_layer(m).plan().routed);
  }
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
  report.seconds = Seconds(start, Clock::now());
  report.data_seconds = Seconds(start, data_done) - (comm_data - comm_start);
  report.forward_seconds = Seconds(data_done, forward_done) - (comm_forward - comm_data);
  report.backward_seconds = Seconds(forward_done, backward_done) - (comm_backward - comm_forward);
  report.optimizer_seconds =
      Seconds(backward_done, optimizer_done) - (comm_optimizer - comm_backward);
  report.communication_seconds = comm() - comm_start;
  if (task_streams_) SY_RETURN_IF_ERROR(EndTaskStep(&report));
  return report;
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

}  // namespace sy::launcher
