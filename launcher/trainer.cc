#include "launcher/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <thread>

#include "optim/grad_clip.h"

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

}  // namespace

Trainer::~Trainer() = default;

bool Trainer::host_backend() const { return backend_->device().is_host(); }

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config) {
  std::unique_ptr<Trainer> trainer(new Trainer(config));
  SY_RETURN_IF_ERROR(trainer->Init());
  return trainer;
}

Status Trainer::Init() {
  SY_ASSIGN_OR_RETURN(Device device, ParseDevice(config_.train.device));
  BackendOptions backend_options;
  backend_options.num_threads = config_.train.threads;
  SY_ASSIGN_OR_RETURN(backend_, CreateBackend(device, backend_options));
  const int threads = config_.train.threads > 0
                          ? config_.train.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(threads);

  SY_ASSIGN_OR_RETURN(dataset_, CreateDataset(config_.data));
  SY_ASSIGN_OR_RETURN(
      Batcher train,
      Batcher::Create(dataset_.get(), MakeBatcherOptions(config_.data, Split::kTrain)));
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
  SY_ASSIGN_OR_RETURN(optimizer_, CreateOptimizer(config_.optimizer_options(), pool_.get()));
  SY_ASSIGN_OR_RETURN(LrSchedule schedule, LrSchedule::Create(config_.schedule_options()));
  schedule_ = std::make_unique<LrSchedule>(schedule);

  for (Parameter& p : model_->parameters()) {
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
  const auto start = Clock::now();
  SY_RETURN_IF_ERROR(train_batcher_->Next(&batch_));
  const auto data_done = Clock::now();
  model_->ZeroGrads();
  SY_ASSIGN_OR_RETURN(LossReport loss, model_->Forward(batch_.tokens, batch_.targets));
  backend_->Synchronize();
  const auto forward_done = Clock::now();
  SY_RETURN_IF_ERROR(model_->Backward());
  if (!host_backend()) {
    for (ParamState& s : states_) {
      backend_->CopyAsync(s.param->grad, s.host_grad, backend_->compute_stream());
    }
  }
  backend_->Synchronize();
  const auto backward_done = Clock::now();

  std::vector<std::span<float>> grads;
  grads.reserve(states_.size());
  for (ParamState& s : states_) {
    grads.emplace_back(s.host_grad.data<float>(), static_cast<size_t>(s.host_grad.numel()));
  }
  StepReport report;
  report.grad_norm =
      config_.train.grad_clip > 0
          ? ClipGradNorm(grads, static_cast<float>(config_.train.grad_clip), pool_.get())
          : GlobalGradNorm(grads, pool_.get());
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
    if (!host_backend()) {
      for (ParamState& s : states_) {
        backend_->CopyAsync(s.host_value, s.param->value, backend_->compute_stream());
      }
      backend_->Synchronize();
    }
  }
  const auto optimizer_done = Clock::now();
  if (!config_.log.routing_trace.empty()) RecordRouting();
  ++step_;
  for (int m = 0; m < model_->config().NumMoeLayers(); ++m) {
    report.expert_load.push_back(model_->moe_layer(m).plan().routed);
  }
  model_->ReleaseActivations();
  report.step = step_;
  report.loss = loss.loss;
  report.ce_loss = loss.ce_loss;
  report.aux_loss = loss.aux_loss;
  report.tokens = batch_.batch_size() * batch_.seq_len();
  report.seconds = Seconds(start, Clock::now());
  report.data_seconds = Seconds(start, data_done);
  report.forward_seconds = Seconds(data_done, forward_done);
  report.backward_seconds = Seconds(forward_done, backward_done);
  report.optimizer_seconds = Seconds(backward_done, optimizer_done);
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

Status Trainer::LoadCheckpoint(const std::string& path) {
  SY_ASSIGN_OR_RETURN(std::string saved_config, ReadTrainCheckpointConfig(path));
  SY_RETURN_IF_ERROR(CheckCheckpointConfig(path, saved_config));
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const ParamState& s : states_) {
    names.push_back(s.param->name);
    const auto dims = s.param->value.shape().dims();
    shapes.emplace_back(dims.begin(), dims.end());
  }
  SY_ASSIGN_OR_RETURN(TrainCheckpoint ckpt,
                      ReadTrainCheckpoint(path, names, shapes, optimizer_->NeedsFirstMoment(),
                                          optimizer_->NeedsSecondMoment()));
  // Everything is read and checked; only now does the trainer's state change.
  SY_RETURN_IF_ERROR(train_batcher_->RestorePosition(ckpt.data_position));
  for (size_t i = 0; i < states_.size(); ++i) {
    ParamState& s = states_[i];
    std::copy(ckpt.params[i].data.begin(), ckpt.params[i].data.end(), s.host_value.data<float>());
    s.m = std::move(ckpt.optimizer_m[i].data);
    s.v = std::move(ckpt.optimizer_v[i].data);
    s.opt_step = ckpt.optimizer_steps[i];
    if (!host_backend()) {
      backend_->CopyAsync(s.host_value, s.param->value, backend_->compute_stream());
    }
  }
  backend_->Synchronize();
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
    SY_ASSIGN_OR_RETURN(std::string latest, LatestCheckpoint(ck.dir));
    SY_RETURN_IF_ERROR(LoadCheckpoint(latest));
    std::fprintf(out, "resumed from %s at step %lld\n", latest.c_str(),
                 static_cast<long long>(step_));
  }
  if (!ck.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(ck.dir, ec);
    if (ec) {
      return InvalidArgumentError("config: 'checkpoint.dir' " + ck.dir + ": cannot create (" +
                                  ec.message() + "); choose a writable directory");
    }
  }
  for (const std::string* path : {&config_.log.metrics, &config_.log.routing_trace}) {
    // Fail now, not after the whole run, when an output file cannot be created.
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
  std::ofstream metrics;
  if (!config_.log.metrics.empty()) {
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
    if (ck.keep > 0) {
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
                               {"optimizer", r.optimizer_seconds}}}};
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
  if (!config_.log.routing_trace.empty()) {
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
