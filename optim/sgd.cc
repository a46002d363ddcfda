#include "optim/sgd.h"

#include <vector>

#include "optim/update_kernels.h"
#include "runtime/core/check.h"

namespace sy {

SgdOptimizer::SgdOptimizer(const OptimizerOptions& options, ThreadPool* pool)
    : Optimizer(options, pool) {
  SY_CHECK(options.kind == OptimizerKind::kSgd)
      << "SgdOptimizer built for kind " << OptimizerKindName(options.kind);
}

void SgdOptimizer::Step(std::span<const ParamGroup> groups, double lr) {
  std::vector<int64_t> steps(groups.size());
  BeginStep(groups, lr, steps);
  std::vector<SgdStepScalars> scalars(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    scalars[i] = MakeSgdStepScalars(options(), lr, steps[i]);
  }
  ForEachChunk(groups, [&](size_t gi, size_t begin, size_t end) {
    const ParamGroup& g = groups[gi];
    float* buffer = g.m != nullptr ? g.m + begin : nullptr;
    SgdUpdate(scalars[gi], g.param + begin, g.grad + begin, buffer, end - begin);
  });
}

}  // namespace sy
