// LrSchedule: the learning rate as a pure function of the optimizer step.
//
// `step` is the number of optimizer steps already taken, so the first update uses Lr(0), as a
// torch LambdaLR stepped after each optimizer.step(). With lr the peak rate and W = warmup_steps,
// T = total_steps:
//
//   warmup (every kind), step < W:  lr * step / max(1, W)
//   kConstant:                      lr
//   kWarmupCosine:                  min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * progress))
//   kWarmupLinear:                  min_lr + (lr - min_lr) * (1 - progress)
//   where progress = clamp((step - W) / max(1, T - W), 0, 1)
//
// With min_lr = 0 these are Hugging Face's get_constant_schedule_with_warmup,
// get_cosine_schedule_with_warmup (num_cycles 0.5) and get_linear_schedule_with_warmup; with
// min_lr > 0 the cosine one is get_cosine_with_min_lr_schedule_with_warmup. One difference: past
// T the rate stays at min_lr (HF's cosine would rise again).
//
// Ownership: a value type. Thread-safety: Lr is const and pure.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

enum class LrScheduleKind : uint8_t {
  kConstant,      // warmup, then lr
  kWarmupCosine,  // warmup, then cosine decay from lr to min_lr at total_steps
  kWarmupLinear,  // warmup, then linear decay from lr to min_lr at total_steps
};

std::string_view LrScheduleKindName(LrScheduleKind kind);  // "constant", "cosine", "linear"
Result<LrScheduleKind> ParseLrScheduleKind(std::string_view name);

struct LrScheduleOptions {
  // The shape of the schedule. Default: kWarmupCosine.
  LrScheduleKind kind = LrScheduleKind::kWarmupCosine;
  // Peak learning rate, reached at the end of warmup; finite and >= 0. Default: 3e-4 (per step).
  double lr = 3e-4;
  // Final learning rate of the decays, in [0, lr]; unused by kConstant. Default: 0.0.
  double min_lr = 0.0;
  // Steps of linear warmup from 0, >= 0. Default: 0 steps (no warmup).
  int64_t warmup_steps = 0;
  // Step at which the decay reaches min_lr; must be >= warmup_steps and >= 1 for the decays,
  // unused by kConstant. Default: 0 steps (so a decay schedule must set it).
  int64_t total_steps = 0;
};

class LrSchedule {
 public:
  // InvalidArgument naming the bad field and the fix.
  static Result<LrSchedule> Create(const LrScheduleOptions& options);

  // The learning rate for the update after `step` (>= 0, checked) updates.
  double Lr(int64_t step) const;

  const LrScheduleOptions& options() const { return options_; }

 private:
  explicit LrSchedule(const LrScheduleOptions& options) : options_(options) {}

  LrScheduleOptions options_;
};

}  // namespace sy
