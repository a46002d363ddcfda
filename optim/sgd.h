// SgdOptimizer: torch.optim.SGD (momentum, dampening, Nesterov, L2 weight decay) over ParamGroups,
// on the CPU. The element math is in optim/update_kernels.h.
//
// Every group needs param, grad and step (0 before the first step); m is the momentum buffer and
// is needed when momentum > 0. As in torch, the first step copies the gradient into the buffer, so
// its initial contents do not matter. Ownership and thread-safety: as Optimizer
// (optim/optimizer.h).
#pragma once

#include <span>

#include "optim/optimizer.h"

namespace sy {

class SgdOptimizer final : public Optimizer {
 public:
  // `options` must be valid (ValidateOptimizerOptions) with kind kSgd (checked); use
  // CreateOptimizer to get a Status for bad options instead.
  SgdOptimizer(const OptimizerOptions& options, ThreadPool* pool);

  void Step(std::span<const ParamGroup> groups, double lr) override;
};

}  // namespace sy
