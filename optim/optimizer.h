// Optimizer: one update of many flat fp32 parameter buffers (ParamGroup) with AdamW, Adam or SGD.
//
// The caller (the trainer, the expert-cache updater) owns every buffer: the fp32 master weights,
// the gradient, the optimizer state (m, v), the step counter and the optional bf16/f16 compute
// copy. A ParamGroup only points at them, so a ZeRO-3 shard, a whole dense layer or one expert
// held in the CPU cache are all the same to the optimizer. Each group carries its own step
// counter because experts are not updated on every step; checkpoint it with the states.
//
//   OptimizerOptions opts;                   // AdamW, torch defaults
//   SY_ASSIGN_OR_RETURN(auto opt, CreateOptimizer(opts, &pool));
//   ParamGroup g{.param = w, .grad = dw, .m = m, .v = v, .n = n, .step = &step,
//                .compute = {.data = w_bf16, .dtype = DType::kBF16}};
//   opt->Step({&g, 1}, schedule.Lr(global_step));
//
// Step updates param, m and v in place, increments *step, and writes the rounded (nearest even)
// updated params to the compute copy in the same pass over memory. Gradients are read as they
// are: unscale (optim/loss_scaler.h) and clip (optim/grad_clip.h) them first.
//
// Work is split into chunks of OptimizerOptions::chunk_elems across groups and run on the thread
// pool; every element's arithmetic is independent of the split, so results do not depend on the
// number of threads.
//
// Ownership: the Optimizer holds its options and a non-owning ThreadPool pointer (null: run on the
// calling thread), which must outlive it. Thread-safety: Step may run concurrently from several
// threads on disjoint groups; a group (and its step counter) must be stepped by one call at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "optim/optimizer_options.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/core/thread_pool.h"

namespace sy {

// Where Step writes a low-precision copy of the updated parameters (mixed-precision training).
struct ComputeCopy {
  void* data = nullptr;        // n elements of `dtype`, caller-owned; nullptr: no copy is written
  DType dtype = DType::kBF16;  // kBF16 or kF16 (checked)
};

// One flat buffer of parameters and its optimizer state. All pointers are host memory holding
// `n` elements and must not overlap one another.
struct ParamGroup {
  float* param = nullptr;       // fp32 master weights, updated in place
  const float* grad = nullptr;  // gradient of the loss, already unscaled and clipped
  float* m = nullptr;           // Adam/AdamW: first moment; SGD: momentum buffer (momentum > 0)
  float* v = nullptr;           // Adam/AdamW: second moment; SGD: unused, may be null
  size_t n = 0;                 // elements in each buffer
  int64_t* step = nullptr;      // updates this group has had; Step increments it first
  ComputeCopy compute;          // optional bf16/f16 copy of the updated param
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update with learning rate `lr` (>= 0, finite) to every group. A group without the
  // state buffers its kind needs, or a bad compute dtype, is a broken invariant (SY_CHECK).
  virtual void Step(std::span<const ParamGroup> groups, double lr) = 0;

  // Whether a ParamGroup needs `m` / `v` for these options.
  bool NeedsFirstMoment() const;
  bool NeedsSecondMoment() const;

  const OptimizerOptions& options() const { return options_; }

 protected:
  Optimizer(const OptimizerOptions& options, ThreadPool* pool);

  // Checks every group, increments its step counter and returns the new values in `steps`.
  void BeginStep(std::span<const ParamGroup> groups, double lr, std::span<int64_t> steps) const;

  // Runs update(group_index, begin, end) over every group cut into chunks of at most
  // options().chunk_elems elements, on the pool, then writes each chunk's compute copy while it
  // is still in cache.
  void ForEachChunk(std::span<const ParamGroup> groups,
                    const std::function<void(size_t, size_t, size_t)>& update) const;

 private:
  OptimizerOptions options_;
  ThreadPool* pool_;  // not owned; may be null
};

// Validates `options` and creates the optimizer of options.kind. `pool` may be null.
Result<std::unique_ptr<Optimizer>> CreateOptimizer(const OptimizerOptions& options,
                                                   ThreadPool* pool);

}  // namespace sy
