#include "optim/adam.h"

#include <vector>

#include "optim/update_kernels.h"
#include "runtime/core/check.h"

namespace sy {

AdamOptimizer::AdamOptimizer(const OptimizerOptions& options, ThreadPool* pool)
    : Optimizer(options, pool) {
  SY_CHECK(options.kind == OptimizerKind::kAdamW || options.kind == OptimizerKind::kAdam)
      << "AdamOptimizer built for kind " << OptimizerKindName(options.kind);
}

void AdamOptimizer::Step(std::span<const ParamGroup> groups, double lr) {
  std::vector<int64_t> steps(groups.size());
  BeginStep(groups, lr, steps);
  std::vector<AdamStepScalars> scalars(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    scalars[i] = MakeAdamStepScalars(options(), lr, steps[i]);
  }
  ForEachChunk(groups, [&](size_t gi, size_t begin, size_t end) {
    const ParamGroup& g = groups[gi];
    AdamUpdate(scalars[gi], g.param + begin, g.grad + begin, g.m + begin, g.v + begin, end - begin);
  });
}

}  // namespace sy
