#include "launcher/training/train_options.h"

#include "runtime/core/device.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace sy::launcher {

DType ComputeDType(Precision precision) {
  switch (precision) {
    case Precision::kF32:
      return DType::kF32;
    case Precision::kBF16:
      return DType::kBF16;
    case Precision::kF16:
      return DType::kF16;
  }
  return DType::kF32;
}

std::string_view PrecisionName(Precision precision) { return DTypeName(ComputeDType(precision)); }

const ConfigSchema<ModelConfig>& ModelConfigSchema() {
  using M = ModelConfig;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<M>();
    s->Field("vocab_size", &M::vocab_size, "Vocabulary size (0 = the dataset's)")
        .Min(0)
        .Field("hidden_size", &M::hidden_size, "Model width")
        .Min(1)
        .Field("num_layers", &M::num_layers, "Decoder layers")
        .Min(1)
        .Field("num_heads", &M::num_heads, "Attention heads")
        .Min(1)
        .Field("num_kv_heads", &M::num_kv_heads, "Key/value heads (0 = num_heads)")
        .Min(0)
        .Field("head_dim", &M::head_dim, "Per-head width (0 = hidden_size / num_heads)")
        .Min(0)
        .Field("intermediate_size", &M::intermediate_size, "Dense FFN width")
        .Min(0)
        .Field("num_experts", &M::num_experts, "Routed experts per MoE layer (0 = dense)")
        .Min(0)
        .Field("moe_intermediate_size", &M::moe_intermediate_size, "Expert FFN width")
        .Min(0)
        .Field("top_k", &M::top_k, "Experts per token")
        .Min(1)
        .Field("norm_topk_prob", &M::norm_topk_prob, "Renormalise the top-k weights")
        .Field("num_shared_experts", &M::num_shared_experts, "Shared experts per MoE layer")
        .Min(0)
        .Field("shared_expert_intermediate_size", &M::shared_expert_intermediate_size,
               "Shared expert width (0 = moe_intermediate_size)")
        .Min(0)
        .Field("shared_expert_gate", &M::shared_expert_gate, "Sigmoid gate on the shared experts")
        .Field("first_k_dense", &M::first_k_dense, "Dense layers before the first MoE layer")
        .Min(0)
        .Field("moe_every", &M::moe_every, "An MoE layer every moe_every layers")
        .Min(1)
        .Field("capacity_factor", &M::capacity_factor, "Expert capacity factor (0 = dropless)")
        .Min(0)
        .Field("router_aux_loss_coef", &M::router_aux_loss_coef, "Load-balancing loss weight")
        .Min(0)
        .Field("router_z_loss_coef", &M::router_z_loss_coef, "Router z-loss weight")
        .Min(0)
        .Field("pregate", &M::pregate, "Pre-gated MoE wiring")
        .Enum("router_scoring", &M::router_scoring,
              {{"softmax", RouterScoring::kSoftmax}, {"sigmoid", RouterScoring::kSigmoid}},
              "Expert scores: softmax, or sigmoid with a correction bias (GLM-4.5; inference)")
        .Field("num_expert_groups", &M::num_expert_groups, "Sigmoid routing: expert groups")
        .Min(1)
        .Field("topk_groups", &M::topk_groups, "Sigmoid routing: groups each token may use")
        .Min(1)
        .Field("routed_scaling_factor", &M::routed_scaling_factor,
               "Sigmoid routing: factor on the routed weights")
        .Min(0)
        .Field("rope_theta", &M::rope_theta, "RoPE base")
        .Min(1)
        .Field("rotary_dim", &M::rotary_dim, "Rotated values per head (0 = the whole head)")
        .Min(0)
        .Field("rms_norm_eps", &M::rms_norm_eps, "RMSNorm epsilon")
        .Min(0)
        .Field("qk_norm", &M::qk_norm, "RMSNorm on queries and keys")
        .Field("qk_norm_per_head", &M::qk_norm_per_head, "qk_norm per head")
        .Field("attention_bias", &M::attention_bias, "Bias on q, k, v")
        .Field("attention_out_bias", &M::attention_out_bias, "Bias on the output projection")
        .Field("tie_word_embeddings", &M::tie_word_embeddings, "LM head reads embed_tokens")
        .Field("recompute", &M::recompute, "Recompute activations in the backward");
    return s;
  }();
  return *schema;
}

const ConfigSchema<TrainOptions>& TrainOptionsSchema() {
  using T = TrainOptions;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<T>();
    s->Field("device", &T::device, "Backend: cpu, sim or cuda:N")
        .Field("steps", &T::steps, "Optimizer steps in all")
        .Min(1)
        .Field("seed", &T::seed, "Parameter initialisation seed")
        .Field("init_stddev", &T::init_stddev, "Stddev of the initial weights")
        .Min(0)
        .Field("grad_clip", &T::grad_clip, "Global gradient-norm limit (0 = off)")
        .Min(0)
        .Field("eval_every", &T::eval_every, "Steps between evaluations (0 = only at the end)")
        .Min(0)
        .Field("eval_batches", &T::eval_batches, "Held-out batches per evaluation")
        .Min(1)
        .Field("threads", &T::threads, "Compute threads (0 = all cores)")
        .Min(0)
        .Enum("placement", &T::placement,
              {{"uniform", Placement::kUniform},
               {"per_task", Placement::kPerTask},
               {"elastic", Placement::kElastic}},
              "Which ranks compute which rows: uniform, per_task or elastic")
        .Field("sim_gflops", &T::sim_gflops, "Modelled compute rate on sim, GFLOP/s (0 = off)")
        .Min(0)
        .Field("sim_link_gbps", &T::sim_link_gbps,
               "Sim host <-> device link, GB/s each way (0 = the backend's 25)")
        .Min(0)
        .Field("sim_link_latency_us", &T::sim_link_latency_us,
               "Sim link latency per copy, us (0 = the backend's 10)")
        .Min(0)
        .Enum("precision", &T::precision,
              {{"f32", Precision::kF32}, {"bf16", Precision::kBF16}, {"f16", Precision::kF16}},
              "Compute precision: f32, or bf16 / f16 with f32 master weights")
        .Field("micro_batches", &T::micro_batches,
               "Micro-batches per step, gradients accumulated before one update")
        .Min(1)
        .Field("wait_for_lock", &T::wait_for_lock,
               "Wait for another run's lock on checkpoint.dir and the expert store instead of "
               "failing at once");
    return s;
  }();
  return *schema;
}

const ConfigSchema<OptimBlock>& OptimBlockSchema() {
  using O = OptimBlock;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<O>();
    s->Enum("kind", &O::kind,
            {{"adamw", OptimizerKind::kAdamW},
             {"adam", OptimizerKind::kAdam},
             {"sgd", OptimizerKind::kSgd}},
            "Update rule")
        .Field("lr", &O::lr, "Peak learning rate")
        .Min(0)
        .Field("min_lr", &O::min_lr, "Learning rate at the end of the decay")
        .Min(0)
        .Field("warmup_steps", &O::warmup_steps, "Linear warmup steps")
        .Min(0)
        .Enum("schedule", &O::schedule,
              {{"cosine", LrScheduleKind::kWarmupCosine},
               {"linear", LrScheduleKind::kWarmupLinear},
               {"constant", LrScheduleKind::kConstant}},
              "Decay after warmup (to train.steps)")
        .Field("beta1", &O::beta1, "Adam first-moment decay")
        .Min(0)
        .Max(0.999999)
        .Field("beta2", &O::beta2, "Adam second-moment decay")
        .Min(0)
        .Max(0.999999)
        .Field("eps", &O::eps, "Adam denominator epsilon")
        .Min(0)
        .Field("weight_decay", &O::weight_decay, "Weight decay")
        .Min(0)
        .Field("momentum", &O::momentum, "SGD momentum")
        .Min(0)
        .Check([](const O& o) -> std::optional<ConfigIssue> {
          if (o.min_lr > o.lr) return ConfigIssue{"min_lr", "must be at most optim.lr"};
          return std::nullopt;
        });
    return s;
  }();
  return *schema;
}

const ConfigSchema<CheckpointOptions>& CheckpointOptionsSchema() {
  using C = CheckpointOptions;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<C>();
    s->Field("dir", &C::dir, "Checkpoint directory (empty = no checkpoints)")
        .Field("every", &C::every, "Steps between checkpoints (0 = only at the end)")
        .Min(0)
        .Field("resume", &C::resume, "Continue from the newest checkpoint in dir that verifies")
        .Field("resume_from", &C::resume_from,
               "Continue from this checkpoint file (empty = the newest in dir)")
        .Field("keep", &C::keep, "Newest checkpoints to keep (0 = all)")
        .Min(0);
    return s;
  }();
  return *schema;
}

const ConfigSchema<LogOptions>& LogOptionsSchema() {
  using L = LogOptions;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<L>();
    s->Field("metrics", &L::metrics, "JSON-lines metrics file (empty = none)")
        .Field("every", &L::every, "Steps between progress lines and metrics records")
        .Min(1)
        .Enum("progress", &L::progress,
              {{"auto", ProgressStyle::kAuto},
               {"bar", ProgressStyle::kBar},
               {"lines", ProgressStyle::kLines},
               {"none", ProgressStyle::kNone}},
              "Progress display")
        .Field("routing_trace", &L::routing_trace,
               "Expert routing trace file written at the end (empty = none)")
        .Field("routing_trace_tokens", &L::routing_trace_tokens,
               "Tokens of each batch recorded in the routing trace, one trace step each")
        .Min(1);
    return s;
  }();
  return *schema;
}

const ConfigSchema<ParallelOptions>& ParallelOptionsSchema() {
  using P = ParallelOptions;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<P>();
    s->Field("ep_size", &P::ep_size, "Ranks per expert-parallel group")
        .Min(1)
        .Field("zero_stage", &P::zero_stage, "ZeRO stage of the dense state: 0 or 3")
        .Min(0)
        .Max(3)
        .Field("hierarchical_a2a", &P::hierarchical_a2a,
               "Two-level (intra-node, inter-node) expert all-to-all")
        .Field("ranks_per_node", &P::ranks_per_node, "Ranks per emulated node (0 = the real nodes)")
        .Min(0)
        .Field("timeout_s", &P::timeout_s,
               "Seconds a collective waits for its peers before aborting the job (0 = forever)")
        .Min(0)
        .Field("embedding_partition", &P::embedding_partition,
               "Partition the token embedding table by columns over the data-parallel ranks")
        .Check([](const P& p) -> std::optional<ConfigIssue> {
          if (p.zero_stage != 0 && p.zero_stage != 3) {
            return ConfigIssue{"zero_stage", "must be 0 (replicated) or 3 (sharded)"};
          }
          if (p.embedding_partition && p.zero_stage == 3) {
            return ConfigIssue{"embedding_partition",
                               "cannot be combined with parallel.zero_stage 3 (ZeRO-3 shards the "
                               "embedding table too); set one of them off"};
          }
          return std::nullopt;
        });
    return s;
  }();
  return *schema;
}

std::string_view StoreFileSystemName(StoreFileSystem fs) {
  switch (fs) {
    case StoreFileSystem::kUring:
      return "io_uring";
    case StoreFileSystem::kPmem:
      return "pmem";
    case StoreFileSystem::kPosix:
      return "posix";
  }
  return "posix";
}

const ConfigSchema<ExpertStoreOptions>& ExpertStoreOptionsSchema() {
  using E = ExpertStoreOptions;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<E>();
    s->Field("dir", &E::dir, "Directory of the expert stores (empty = expert states in memory)")
        .Enum("filesystem", &E::filesystem,
              {{"uring", StoreFileSystem::kUring},
               {"pmem", StoreFileSystem::kPmem},
               {"posix", StoreFileSystem::kPosix}},
              "I/O of the store: uring (posix where unavailable), pmem or posix")
        .Field("cache_mib", &E::cache_mib, "CPU cache budget for expert states per rank (MiB)")
        .Min(0)
        .Field("lfu_threshold", &E::lfu_threshold,
               "LFU eviction candidates have at least this count (MoESys Algorithm 2)")
        .Min(0)
        .Field("decay", &E::decay, "Factor the LFU counts are multiplied by every decay_every")
        .Min(0)
        .Max(1)
        .Field("decay_every", &E::decay_every, "Steps between LFU count decays (0 = never)")
        .Min(0)
        .Field("prefetch", &E::prefetch, "Read the next needed expert while one is updated")
        .Field("staging_mib", &E::staging_mib,
               "Part of cache_mib for states read ahead of the update (MiB, -1 = half, 0 = none)")
        .Min(-1)
        .Field("sparse_adam", &E::sparse_adam,
               "Skip the zero-gradient AdamW steps of experts without tokens (not exact)")
        .Check([](const E& e) -> std::optional<ConfigIssue> {
          if (!e.dir.empty() && e.cache_mib <= 0) {
            return ConfigIssue{"cache_mib", "must be positive when expert_store.dir is set"};
          }
          if (!e.dir.empty() && e.staging_mib >= e.cache_mib) {
            return ConfigIssue{"staging_mib",
                               "must be below cache_mib: the staging is the part of the cache's "
                               "budget given to states read ahead (-1: half of it, 0: none)"};
          }
          if (e.decay <= 0) return ConfigIssue{"decay", "must be in (0, 1]"};
          return std::nullopt;
        });
    return s;
  }();
  return *schema;
}

const ConfigSchema<LossScalerOptions>& LossScalerOptionsSchema() {
  using L = LossScalerOptions;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<L>();
    s->Field("init_scale", &L::init_scale, "The first loss scale (train.precision f16)")
        .Field("growth_factor", &L::growth_factor, "Scale multiplier after growth_interval")
        .Field("backoff_factor", &L::backoff_factor, "Scale multiplier on an inf/NaN gradient")
        .Field("growth_interval", &L::growth_interval,
               "Consecutive finite steps before the scale grows")
        .Check([](const L& l) -> std::optional<ConfigIssue> {
          const Status valid = ValidateLossScalerOptions(l);
          if (valid.ok()) return std::nullopt;
          // "loss_scaler.<field> ...": the field and the message after it.
          const std::string& m = valid.message();
          const size_t dot = m.find('.'), space = m.find(' ');
          if (dot == std::string::npos || space == std::string::npos || space < dot) {
            return ConfigIssue{"init_scale", m};
          }
          return ConfigIssue{m.substr(dot + 1, space - dot - 1), m.substr(space + 1)};
        });
    return s;
  }();
  return *schema;
}

const ConfigSchema<ElasticOptions>& ElasticOptionsSchema() {
  using E = ElasticOptions;
  static const auto* schema = [] {
    auto* s = new ConfigSchema<E>();
    s->Field("rebalance_every", &E::rebalance_every,
             "Steps between rebalancing decisions under train.placement elastic (0 = never)")
        .Min(0)
        .Field("min_gain", &E::min_gain,
               "Predicted step-time gain a new placement must exceed to be adopted")
        .Min(-1)
        .Max(1);
    return s;
  }();
  return *schema;
}

OptimizerOptions TrainConfig::optimizer_options() const {
  OptimizerOptions o;
  o.kind = optim.kind;
  o.beta1 = optim.beta1;
  o.beta2 = optim.beta2;
  o.eps = optim.eps;
  o.weight_decay = optim.weight_decay;
  o.momentum = optim.momentum;
  return o;
}

LrScheduleOptions TrainConfig::schedule_options() const {
  LrScheduleOptions o;
  o.kind = optim.schedule;
  o.lr = optim.lr;
  o.min_lr = optim.min_lr;
  o.warmup_steps = optim.warmup_steps;
  o.total_steps = std::max(train.steps, optim.warmup_steps);
  return o;
}

Result<TrainConfig> LoadTrainConfig(Config& config) {
  SY_RETURN_IF_ERROR(
      config.CheckKnownBlocks({"model", "data", "train", "optim", "checkpoint", "log", "parallel",
                               "expert_store", "elastic", "loss_scaler"}));
  TrainConfig out;
  SY_RETURN_IF_ERROR(DataOptionsSchema().Bind(config, "data", &out.data));
  SY_RETURN_IF_ERROR(TrainOptionsSchema().Bind(config, "train", &out.train));
  SY_RETURN_IF_ERROR(OptimBlockSchema().Bind(config, "optim", &out.optim));
  SY_RETURN_IF_ERROR(CheckpointOptionsSchema().Bind(config, "checkpoint", &out.checkpoint));
  SY_RETURN_IF_ERROR(LogOptionsSchema().Bind(config, "log", &out.log));
  SY_RETURN_IF_ERROR(ParallelOptionsSchema().Bind(config, "parallel", &out.parallel));
  SY_RETURN_IF_ERROR(ModelConfigSchema().Bind(config, "model", &out.model));
  SY_RETURN_IF_ERROR(ExpertStoreOptionsSchema().Bind(config, "expert_store", &out.expert_store));
  SY_RETURN_IF_ERROR(ElasticOptionsSchema().Bind(config, "elastic", &out.elastic));
  SY_RETURN_IF_ERROR(LossScalerOptionsSchema().Bind(config, "loss_scaler", &out.loss_scaler));
  if (out.train.placement != Placement::kUniform && out.data.source != DataSource::kSynthetic) {
    return InvalidArgumentError(config.Where("train.placement") +
                                ": 'train.placement' per_task and elastic place the synthetic "
                                "tasks on ranks, but 'data.source' is not synthetic; set "
                                "train.placement=uniform");
  }
  if (out.expert_store.enabled() && out.model.num_experts == 0) {
    return InvalidArgumentError(config.Where("expert_store.dir") +
                                ": 'expert_store.dir' is set but the model has no experts "
                                "(model.num_experts 0); unset expert_store.dir");
  }
  Result<Device> device = ParseDevice(out.train.device);
  if (!device.ok()) {
    return InvalidArgumentError(config.Where("train.device") + ": 'train.device' " +
                                device.status().message() + "; use cpu or sim");
  }
  Status valid = out.model.Validate();
  if (!valid.ok() && out.model.vocab_size == 0) {
    // vocab_size 0 means "the dataset's"; LoadTrainConfig callers fill it once the data is open.
    ModelConfig probe = out.model;
    probe.vocab_size = 1;
    valid = probe.Validate();
  }
  if (!valid.ok()) {
    return InvalidArgumentError(config.Where("model") + ": " + valid.message());
  }
  const int ep = out.parallel.ep_size;
  if (ep > 1 && (out.model.num_experts == 0 || out.model.num_experts % ep != 0)) {
    return InvalidArgumentError(config.Where("parallel.ep_size") + ": 'parallel.ep_size' " +
                                std::to_string(ep) + " must divide model.num_experts (" +
                                std::to_string(out.model.num_experts) +
                                "); choose an ep_size that divides the experts of each MoE layer");
  }
  if (out.parallel.embedding_partition && out.model.tie_word_embeddings) {
    return InvalidArgumentError(
        config.Where("parallel.embedding_partition") +
        ": 'parallel.embedding_partition' needs untied embeddings, but "
        "'model.tie_word_embeddings' is true (the LM head would need the whole table on every "
        "rank); set model.tie_word_embeddings=false or parallel.embedding_partition=false");
  }
  out.effective_json = config.DumpEffective();
  return out;
}

Result<TrainConfig> LoadTrainConfigFile(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  SY_ASSIGN_OR_RETURN(Config config, Config::Load(path));
  SY_RETURN_IF_ERROR(config.ApplyOverrides(overrides));
  return LoadTrainConfig(config);
}

Result<TrainConfig> LoadTrainConfigText(std::string_view text, const std::string& source,
                                        const std::vector<std::string>& overrides) {
  SY_ASSIGN_OR_RETURN(Config config, Config::Parse(text, source));
  SY_RETURN_IF_ERROR(config.ApplyOverrides(overrides));
  return LoadTrainConfig(config);
}

}  // namespace sy::launcher
