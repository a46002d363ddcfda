// Dynamic loss scaling for fp16/bf16 mixed-precision training, as torch.cuda.amp.GradScaler.
//
// Each step: multiply the loss by scale() before backward; call UnscaleGradsAndCheckNonFinite
// with inv_scale() on every gradient buffer (or the member of that name); skip the optimizer step
// when it found inf/NaN; then Update(found_non_finite) once.
//
// Update follows torch's _amp_update_scale_ exactly: on inf/NaN the scale is multiplied by
// backoff_factor and the run of good steps restarts; after growth_interval consecutive good steps
// it is multiplied by growth_factor (unless that would overflow float32) and the run restarts. The
// scale is a float32, as torch keeps it, and inv_scale() is float32(1 / double(scale)).
//
// Ownership: a value type. Thread-safety: not thread-safe; the training loop owns it.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/core/status.h"
#include "runtime/core/thread_pool.h"

namespace sy {

struct LossScalerOptions {
  // The first scale. Must be finite and > 0. Default: 65536.0 (2^16), as GradScaler.
  double init_scale = 65536.0;
  // Multiplier after growth_interval consecutive finite steps, > 1. Default: 2.0.
  double growth_factor = 2.0;
  // Multiplier when a step's gradients hold inf/NaN, in (0, 1). Default: 0.5.
  double backoff_factor = 0.5;
  // Consecutive finite steps before the scale grows, >= 1. Default: 2000 steps.
  int64_t growth_interval = 2000;
};

// OK, or InvalidArgument naming the first bad field and its accepted range.
Status ValidateLossScalerOptions(const LossScalerOptions& options);

// Multiplies every gradient element by inv_scale in place and returns true when any element was
// inf or NaN before scaling (torch._amp_foreach_non_finite_check_and_unscale_). `pool` may be
// null.
[[nodiscard]] bool UnscaleGradsAndCheckNonFinite(std::span<const std::span<float>> grads,
                                                 float inv_scale, ThreadPool* pool);

class DynamicLossScaler {
 public:
  // What a checkpoint stores to resume the scaler exactly.
  struct State {
    float scale = 0.0f;
    int64_t growth_tracker = 0;  // consecutive finite steps since the last change
  };

  static Result<DynamicLossScaler> Create(const LossScalerOptions& options);

  float scale() const { return scale_; }
  float inv_scale() const { return static_cast<float>(1.0 / static_cast<double>(scale_)); }
  int64_t growth_tracker() const { return growth_tracker_; }
  const LossScalerOptions& options() const { return options_; }

  // UnscaleGradsAndCheckNonFinite with inv_scale().
  [[nodiscard]] bool UnscaleGradsAndCheckNonFinite(std::span<const std::span<float>> grads,
                                                   ThreadPool* pool) const;

  // Adjusts the scale after one step; call exactly once per step.
  void Update(bool found_non_finite);

  State state() const { return {scale_, growth_tracker_}; }
  // Restores a checkpointed state; InvalidArgument when the scale is not finite and > 0 or the
  // tracker is outside [0, growth_interval).
  Status Restore(const State& state);

 private:
  explicit DynamicLossScaler(const LossScalerOptions& options);

  LossScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace sy
