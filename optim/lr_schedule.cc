#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "runtime/core/check.h"

namespace sy {

std::string_view LrScheduleKindName(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant:
      return "constant";
    case LrScheduleKind::kWarmupCosine:
      return "cosine";
    case LrScheduleKind::kWarmupLinear:
      return "linear";
  }
  return "unknown";
}

Result<LrScheduleKind> ParseLrScheduleKind(std::string_view name) {
  for (LrScheduleKind kind :
       {LrScheduleKind::kConstant, LrScheduleKind::kWarmupCosine, LrScheduleKind::kWarmupLinear}) {
    if (name == LrScheduleKindName(kind)) return kind;
  }
  return InvalidArgumentError("lr_schedule.kind is \"" + std::string(name) +
                              "\"; expected one of \"constant\", \"cosine\", \"linear\"");
}

Result<LrSchedule> LrSchedule::Create(const LrScheduleOptions& options) {
  if (!(options.lr >= 0.0 && std::isfinite(options.lr))) {
    return InvalidArgumentError("lr_schedule.lr is " + std::to_string(options.lr) +
                                "; it must be finite and >= 0, e.g. 3e-4");
  }
  if (options.warmup_steps < 0) {
    return InvalidArgumentError("lr_schedule.warmup_steps is " +
                                std::to_string(options.warmup_steps) + "; it must be >= 0");
  }
  if (options.kind != LrScheduleKind::kConstant) {
    if (!(options.min_lr >= 0.0 && options.min_lr <= options.lr)) {
      return InvalidArgumentError("lr_schedule.min_lr is " + std::to_string(options.min_lr) +
                                  "; it must be in [0, lr = " + std::to_string(options.lr) + "]");
    }
    if (options.total_steps < 1 || options.total_steps < options.warmup_steps) {
      return InvalidArgumentError(
          "lr_schedule.total_steps is " + std::to_string(options.total_steps) + "; a " +
          std::string(LrScheduleKindName(options.kind)) +
          " schedule needs total_steps >= 1 and >= warmup_steps (" +
          std::to_string(options.warmup_steps) + "): set it to the planned number of steps");
    }
  }
  return LrSchedule(options);
}

double LrSchedule::Lr(int64_t step) const {
  SY_CHECK_GE(step, 0);
  const LrScheduleOptions& o = options_;
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step) /
           static_cast<double>(std::max<int64_t>(1, o.warmup_steps));
  }
  double progress = static_cast<double>(step - o.warmup_steps) /
                    static_cast<double>(std::max<int64_t>(1, o.total_steps - o.warmup_steps));
  progress = std::clamp(progress, 0.0, 1.0);
  switch (o.kind) {
    case LrScheduleKind::kConstant:
      return o.lr;
    case LrScheduleKind::kWarmupCosine:
      return o.min_lr + (o.lr - o.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    case LrScheduleKind::kWarmupLinear:
      return o.min_lr + (o.lr - o.min_lr) * (1.0 - progress);
  }
  SY_CHECK(false) << "unknown LrScheduleKind " << static_cast<int>(o.kind);
  return 0.0;
}

}  // namespace sy
