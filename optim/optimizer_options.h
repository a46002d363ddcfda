// OptimizerOptions: the hyper-parameters of the optimizer math (AdamW, Adam, SGD), as the JSON
// config's "optimizer" section maps onto them. The learning rate is not here: it changes every step
// and comes from the schedule (optim/lr_schedule.h), passed to Optimizer::Step.
//
// The defaults and the meaning of every field follow torch.optim (AdamW, Adam, SGD), with one
// exception: weight_decay defaults to 0 for every kind (torch.optim.AdamW defaults to 0.01).
//
// Ownership: plain values. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

enum class OptimizerKind : uint8_t {
  kAdamW,  // torch.optim.AdamW: decoupled weight decay, p -= lr * wd * p before the Adam update
  kAdam,   // torch.optim.Adam: L2 penalty, wd * p added to the gradient
  kSgd,    // torch.optim.SGD: momentum, dampening, optional Nesterov, L2 weight decay
};

std::string_view OptimizerKindName(OptimizerKind kind);  // "adamw", "adam", "sgd"
// Parses "adamw", "adam" or "sgd"; anything else is InvalidArgument naming the accepted values.
Result<OptimizerKind> ParseOptimizerKind(std::string_view name);

struct OptimizerOptions {
  // Which update rule. Default: kAdamW.
  OptimizerKind kind = OptimizerKind::kAdamW;
  // Adam/AdamW decay of the first moment, in [0, 1). Default: 0.9 (dimensionless).
  double beta1 = 0.9;
  // Adam/AdamW decay of the second moment, in [0, 1). Default: 0.999 (dimensionless).
  double beta2 = 0.999;
  // Adam/AdamW term added to the denominator, >= 0. Default: 1e-8 (gradient units).
  double eps = 1e-8;
  // Weight decay coefficient, >= 0: decoupled for AdamW, L2 for Adam and SGD. Default: 0.0 (per
  // unit of learning rate).
  double weight_decay = 0.0;
  // SGD momentum factor, >= 0 (0 disables the momentum buffer). Default: 0.0 (dimensionless).
  double momentum = 0.0;
  // SGD dampening of the gradient added to the momentum buffer, in [0, 1]. Default: 0.0.
  double dampening = 0.0;
  // SGD Nesterov momentum; needs momentum > 0 and dampening == 0 (as torch). Default: false.
  bool nesterov = false;
  // Elements per unit of parallel work; buffers smaller than this run on the calling thread.
  // Default: 65536 elements (256 KiB of fp32 per buffer).
  int64_t chunk_elems = 65536;
};

// OK, or InvalidArgument naming the first bad field, its value and the accepted range.
Status ValidateOptimizerOptions(const OptimizerOptions& options);

}  // namespace sy
