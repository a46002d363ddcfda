#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "runtime/core/check.h"

namespace sy {
namespace {

// Each chunk is updated and converted in blocks this small, so the compute copy reads the updated
// params from L1 instead of making a second trip to memory.
constexpr size_t kCopyBlockElems = 4096;

void WriteComputeCopy(const ComputeCopy& copy, const float* param, size_t begin, size_t end) {
  switch (copy.dtype) {
    case DType::kBF16:
      ConvertF32ToBF16(param + begin, static_cast<BF16*>(copy.data) + begin, end - begin);
      return;
    case DType::kF16:
      ConvertF32ToF16(param + begin, static_cast<F16*>(copy.data) + begin, end - begin);
      return;
    case DType::kF32:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kI8:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kF64:
      break;
  }
  SY_CHECK(false) << "ComputeCopy dtype " << DTypeName(copy.dtype) << " is not bf16 or f16";
}

struct WorkItem {
  size_t group;
  size_t begin;
  size_t end;
};

}  // namespace

Optimizer::Optimizer(const OptimizerOptions& options, ThreadPool* pool)
    : options_(options), pool_(pool) {
  Status valid = ValidateOptimizerOptions(options);
  SY_CHECK(valid.ok()) << valid.ToString();
}

bool Optimizer::NeedsFirstMoment() const {
  return options_.kind != OptimizerKind::kSgd || options_.momentum != 0.0;
}

bool Optimizer::NeedsSecondMoment() const { return options_.kind != OptimizerKind::kSgd; }

void Optimizer::BeginStep(std::span<const ParamGroup> groups, double lr,
                          std::span<int64_t> steps) const {
  SY_CHECK(std::isfinite(lr) && lr >= 0.0) << "learning rate " << lr << " is not finite and >= 0";
  SY_CHECK_EQ(groups.size(), steps.size());
  bool needs_m = NeedsFirstMoment();
  bool needs_v = NeedsSecondMoment();
  for (size_t i = 0; i < groups.size(); ++i) {
    const ParamGroup& g = groups[i];
    SY_CHECK(g.step != nullptr) << "ParamGroup " << i << " has no step counter";
    if (g.n > 0) {
      SY_CHECK(g.param != nullptr && g.grad != nullptr)
          << "ParamGroup " << i << " has no param or grad buffer";
      SY_CHECK(!needs_m || g.m != nullptr) << "ParamGroup " << i << " has no m buffer, which "
                                           << OptimizerKindName(options_.kind) << " needs";
      SY_CHECK(!needs_v || g.v != nullptr) << "ParamGroup " << i << " has no v buffer, which "
                                           << OptimizerKindName(options_.kind) << " needs";
      SY_CHECK(g.compute.data == nullptr || g.compute.dtype == DType::kBF16 ||
               g.compute.dtype == DType::kF16)
          << "ParamGroup " << i << " compute copy is " << DTypeName(g.compute.dtype)
          << "; it must be bf16 or f16";
    }
    SY_CHECK_GE(*g.step, 0);
    steps[i] = ++*g.step;
  }
}

void Optimizer::ForEachChunk(std::span<const ParamGroup> groups,
                             const std::function<void(size_t, size_t, size_t)>& update) const {
  size_t chunk = static_cast<size_t>(options_.chunk_elems);
  std::vector<WorkItem> items;
  size_t total = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    for (size_t begin = 0; begin < groups[gi].n; begin += chunk) {
      items.push_back({gi, begin, std::min(groups[gi].n, begin + chunk)});
    }
    total += groups[gi].n;
  }
  auto run_items = [&](int64_t first, int64_t last) {
    for (int64_t it = first; it < last; ++it) {
      const WorkItem& item = items[static_cast<size_t>(it)];
      const ParamGroup& g = groups[item.group];
      for (size_t b = item.begin; b < item.end; b += kCopyBlockElems) {
        size_t e = std::min(item.end, b + kCopyBlockElems);
        update(item.group, b, e);
        if (g.compute.data != nullptr) WriteComputeCopy(g.compute, g.param, b, e);
      }
    }
  };
  int64_t num_items = static_cast<int64_t>(items.size());
  if (pool_ == nullptr || total <= chunk) {
    run_items(0, num_items);
  } else {
    pool_->ParallelFor(num_items, 1, run_items);
  }
}

Result<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options,
                                                   ThreadPool* pool) {
  SY_RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  switch (options.kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      return std::unique_ptr<Optimizer>(std::make_unique<AdamOptimizer>(options, pool));
    case OptimizerKind::kSgd:
      return std::unique_ptr<Optimizer>(std::make_unique<SgdOptimizer>(options, pool));
  }
  return InvalidArgumentError("optimizer.kind has an unknown value");
}

}  // namespace sy
