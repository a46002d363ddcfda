#include "launcher/training/training_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sy::launcher {
namespace {

constexpr double kF32 = 4;

// A setting as the user wrote it: 2.5 -> "2.5", 10000000 -> "10000000".
std::string FormatSetting(double value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.12g", value);
  return text;
}

// A number for people: 1234567 -> "1234567", 1.6e9 -> "1.6e+09".
std::string FormatCount(double n) {
  char text[48];
  std::snprintf(text, sizeof(text), n < 1e7 ? "%.0f" : "%.2g", n);
  return text;
}

}  // namespace

bool UsesExpertWorkingSet(const TrainConfig& config) { return config.expert_store.enabled(); }

double ExpertWorkingSetBytes(const TrainConfig& config, double moe_layers, int world_size) {
  const ModelConfig& m = config.model;
  const double experts = static_cast<double>(m.num_experts) /
                         (world_size > 1 ? std::max(1, config.parallel.ep_size) : 1);
  const double slots = static_cast<double>(config.data.batch_size) *
                       static_cast<double>(config.data.seq_len) * m.top_k;
  const double per_expert =
      3.0 * static_cast<double>(m.hidden_size) * static_cast<double>(m.moe_intermediate_size);
  // On a device, the host copies the store reads and writes as much again.
  const double copies = config.train.device == "cpu" ? 1 : 2;
  return moe_layers * std::min(experts, slots) * per_expert * 2 * kF32 * copies;
}

TrainingMemoryEstimate EstimateTrainingMemory(const TrainConfig& config, int64_t vocab_size,
                                              int world_size) {
  const ModelConfig& m = config.model;
  const double w = std::max(1, world_size);
  const double layers = m.num_layers;
  // The layer kinds by arithmetic, not by a loop over what may be 10^9 layers.
  double moe_layers = 0;
  if (m.num_experts > 0 && m.moe_every > 0 && m.num_layers > m.first_k_dense) {
    moe_layers = std::floor(static_cast<double>(m.num_layers - m.first_k_dense - 1) /
                            static_cast<double>(m.moe_every)) +
                 1;
  }
  const double dense_layers = layers - moe_layers;
  const double h = static_cast<double>(m.hidden_size);
  const double d = static_cast<double>(m.dim_per_head());
  const double q = m.num_heads * d, kv = m.kv_heads() * d;
  const double v = static_cast<double>(vocab_size);
  const double e = m.num_experts, k = m.top_k;
  const double inter = static_cast<double>(m.moe_intermediate_size);
  const double dense_inter = static_cast<double>(m.intermediate_size);
  const double shared = static_cast<double>(m.shared_intermediate());

  // Parameters of this rank: the experts split over the EP group, the dense ones over the world
  // under ZeRO-3.
  const double attention = h * q + 2 * h * kv + q * h + 2 * h;
  double dense_params = v * h * (m.tie_word_embeddings ? 1 : 2) + h + layers * attention +
                        dense_layers * 3 * h * dense_inter +
                        moe_layers * (e * h * (m.pregate ? 2 : 1) + 3 * h * shared);
  double expert_params = moe_layers * e * 3 * h * inter;
  if (world_size > 1) {
    expert_params /= std::max(1, config.parallel.ep_size);
    if (config.parallel.zero_stage == 3) dense_params /= w;
  }
  const bool adam = config.optim.kind != OptimizerKind::kSgd;
  const bool momentum = !adam && config.optim.momentum != 0;
  const bool host = config.train.device == "cpu" || config.train.device == "sim";
  // Value and gradient, the moments, and host copies of both for a device backend; in bf16 / f16
  // (docs/training.md, "Precision") the value is the 2-byte compute copy beside an f32 master on
  // the host (and a 2-byte staging copy for a device backend).
  const bool mixed = config.train.precision != Precision::kF32;
  const double act = mixed ? 2 : kF32;  // bytes of an activation, and of the compute copy
  const double per_parameter = (2 +
                                (adam       ? 2
                                 : momentum ? 1
                                            : 0) +
                                (host ? 0 : 2)) *
                                   kF32 +
                               (mixed ? act + (host ? 0 : act) : 0);

  TrainingMemoryEstimate out;
  out.parameter_bytes = (dense_params + expert_params) * per_parameter;
  const double rows_per_rank = static_cast<double>(config.data.batch_size) / w;
  if (config.expert_store.enabled()) {
    // The store holds the experts' master, m and v; memory holds its cache (the prefetch's
    // staging included: expert_state_store.h) and a compute copy.
    const double cache = config.expert_store.cache_mib * 1024 * 1024;
    double compute_copy = expert_params * (2 + (host ? 0 : 2)) * kF32;  // every expert (resident)
    if (UsesExpertWorkingSet(config)) {
      compute_copy = ExpertWorkingSetBytes(config, moe_layers, world_size);
    }
    out.parameter_bytes = dense_params * per_parameter + compute_copy + cache;
    out.store_cache_bytes = cache;
  }
  // Per token, what the forward keeps: the decoder layer's norms, attention input and output and
  // the residual (6 h), q/k/v and their rotated copies with the attention output (3 q + 3 kv),
  // and the FFN's rows.
  const double moe_ffn = 2 * e + 4 * k + 2 * k * h + 3 * k * inter + 3 * shared;
  const double per_layer_base = 6 * h + 3 * q + 3 * kv;
  // The largest layer's activations; its backward's temporaries (the gradients of the same
  // tensors) are about as many, alive while that layer runs backward.
  const double largest_layer = per_layer_base + std::max(moe_layers > 0 ? moe_ffn : 0.0,
                                                         dense_layers > 0 ? 3 * dense_inter : 0.0);
  double per_token_floats;
  if (m.recompute) {
    // Only each layer's input is kept; one layer's activations are rebuilt at a time.
    per_token_floats = layers * h + 2 * largest_layer;
  } else {
    per_token_floats = layers * per_layer_base + moe_layers * moe_ffn +
                       dense_layers * 3 * dense_inter + largest_layer;
  }
  // The final hidden state, the logits and their gradient.
  per_token_floats += h + 2 * v + 2;
  out.tokens_per_step = rows_per_rank * static_cast<double>(config.data.seq_len);
  const double data_per_token = 2 * 2 * 4;  // i32 tokens and targets, a train and an eval batch
  // One micro-batch's activations are alive at a time; bf16 / f16 hold them in 2 bytes (the
  // residual stream and the logits stay f32: counted at 4 bytes here, a bound).
  const double micro = static_cast<double>(std::max<int64_t>(1, config.train.micro_batches));
  const double per_token_bytes =
      per_token_floats * (mixed ? act : kF32) + (mixed ? (layers * h + 2 * v) * (kF32 - act) : 0);
  out.bytes_per_token = per_token_bytes / micro + data_per_token;
  out.activation_bytes = out.tokens_per_step * per_token_bytes / micro;
  out.data_bytes = out.tokens_per_step * data_per_token;
  return out;
}

Status CheckTrainingMemory(const TrainConfig& config, const TrainingMemoryEstimate& estimate,
                           double available_bytes, int world_size) {
  if (available_bytes <= 0 || estimate.total() <= available_bytes) return Status::Ok();
  const double w = std::max(1, world_size);
  const std::string need =
      "needs about " + FormatMemory(estimate.total()) + " (parameters and optimizer state " +
      FormatMemory(estimate.parameter_bytes) + ", activations " +
      FormatMemory(estimate.activation_bytes) + ", batches " + FormatMemory(estimate.data_bytes) +
      ")" + (world_size > 1 ? " per rank" : "") + ", but " + FormatMemory(available_bytes) +
      " of memory is available";
  const std::string step = "data.batch_size " + std::to_string(config.data.batch_size) +
                           " x data.seq_len " + std::to_string(config.data.seq_len) + " = " +
                           FormatCount(static_cast<double>(config.data.batch_size) *
                                       static_cast<double>(config.data.seq_len)) +
                           " tokens a step";
  const double rest = estimate.total() - estimate.store_cache_bytes;
  if (estimate.store_cache_bytes > estimate.parameter_bytes - estimate.store_cache_bytes &&
      rest < available_bytes) {
    const double most_mib = std::floor((available_bytes - rest) / (1024.0 * 1024.0));
    return ResourceExhaustedError(
        "config: expert_store.cache_mib " + FormatSetting(config.expert_store.cache_mib) + " " +
        need + "; the store's cache does not fit: lower expert_store.cache_mib to at most " +
        FormatCount(most_mib));
  }
  if (estimate.parameter_bytes >= available_bytes) {
    return ResourceExhaustedError(
        "config: the model (" + std::to_string(config.model.num_layers) + " layers, hidden " +
        std::to_string(config.model.hidden_size) + ", " + std::to_string(config.model.num_experts) +
        " experts) " + need +
        "; its parameters alone do not fit: lower model.num_layers, model.hidden_size or "
        "model.num_experts");
  }
  const double room = available_bytes - estimate.parameter_bytes;
  const double max_tokens = std::floor(room / estimate.bytes_per_token);
  const double seq_len = static_cast<double>(config.data.seq_len);
  if (max_tokens < seq_len) {
    return ResourceExhaustedError("config: " + step + " " + need +
                                  "; one example of data.seq_len tokens does not fit: lower "
                                  "data.seq_len to at most " +
                                  FormatCount(std::max(0.0, max_tokens)));
  }
  const double max_rows = std::floor(max_tokens / seq_len) * w;
  return ResourceExhaustedError("config: " + step + " " + need +
                                "; lower data.batch_size to at most " + FormatCount(max_rows));
}

}  // namespace sy::launcher
