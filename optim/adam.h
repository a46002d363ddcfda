// AdamOptimizer: torch.optim.AdamW (decoupled weight decay) and torch.optim.Adam (L2 weight decay)
// over ParamGroups, on the CPU. The element math is in optim/update_kernels.h; the CUDA version of
// the same math is optim/cuda/adamw_cuda.h.
//
// Every group needs param, grad, m, v (zero-initialised before the first step) and step (0 before
// the first step). Ownership and thread-safety: as Optimizer (optim/optimizer.h).
#pragma once

#include <span>

#include "optim/optimizer.h"

namespace sy {

class AdamOptimizer final : public Optimizer {
 public:
  // `options` must be valid (ValidateOptimizerOptions) with kind kAdamW or kAdam (checked); use
  // CreateOptimizer to get a Status for bad options instead.
  AdamOptimizer(const OptimizerOptions& options, ThreadPool* pool);

  void Step(std::span<const ParamGroup> groups, double lr) override;
};

}  // namespace sy
