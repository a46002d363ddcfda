// Zero3: ZeRO stage 3 for the dense (non-expert) parameters of an MoeModel over a data-parallel
// group (MoESys Algorithm 1; docs/parallel.md, "ZeRO-3").
//
// Layout. The dense parameters (every Parameter with is_expert == false) are grouped into the
// model's units (runtime/model/layer_hooks.h: embedding, each decoder layer, head). Unit u is
// flattened, in ParameterStore order, into D_u f32 elements, padded to P_u (a multiple of the
// group size N), and rank r owns elements [r*S_u, (r+1)*S_u) with S_u = P_u / N: an fp32 master
// shard, the optimizer's m and v shards and a gradient shard, 16 bytes per owned element (m and v
// only when the optimizer needs them). So the persistent dense state per rank is 16*D/N bytes
// plus padding, where D = sum of D_u.
//
// Mixed precision (Note [mixed precision] in runtime/model/moe_model.h). A dense parameter whose
// value is bf16 or f16 (the model's compute copy) keeps its f32 master in the shard and, beside
// it, the master's 16-bit rounding (2 more bytes per owned element), which the optimizer writes in
// the same pass as the update and the all-gathers move: half the bytes of an f32 gather. Its
// gradients stay f32 and are reduce-scattered as f32. LoadMasters sets the masters from exact f32
// values (the model's 16-bit values are their rounding), and GatherOptimizerState returns them.
//
// Full copies. The model's own parameter and gradient tensors stay where they are (layers hold
// views with raw pointers into them), so "freeing" a unit's full copy releases the physical
// memory behind its tensors and keeps their addresses (Backend::ReleaseBacking / RestoreBacking):
// on cpu madvise(MADV_DONTNEED) of whole pages, the next write committing fresh zero pages; on
// cuda, CUDA virtual memory (cuMemUnmap, and cuMemCreate + cuMemMap again before the next gather),
// for which the model must be built with ModelOptions::releasable_parameters. Create checks every
// dense buffer (Backend::IsReleasable) and refuses anything else (the sim backend).
// On a device the collectives still move host memory: a gather lands in the staging buffer and
// is copied up on the communication thread's own stream; the gradients come down into the staging
// before the reduce-scatter.
//
// Schedule (the LayerHooks the model calls; Create installs them, the destructor removes them):
//   BeforeForward(u)   waits for u's all-gather (starting it if needed) and starts u+1's on the
//                      communication thread (prefetch), so it overlaps u's compute.
//   AfterForward(u)    releases u's full parameters.
//   BeforeBackward(u)  as BeforeForward, prefetching u-1; then zeroes u's full gradients.
//   AfterBackward(u)   starts the reduce-scatter (sum) of u's full gradients, multiplied by
//                      set_gradient_prescale(), into u's gradient shard (added: shards accumulate
//                      over micro-batches until ZeroGrads); then releases u's full gradients and
//                      parameters. AfterBackward(0) waits for every pending reduce-scatter.
// During a forward at most two units are gathered (current + prefetched); during a backward at
// most three parameter copies (current, prefetched, the one being reduce-scattered) and two
// gradient copies.
//
// Training step (the caller sums the expert gradients itself; experts are untouched here):
//   SY_ASSIGN_OR_RETURN(auto zero, Zero3::Create(*model, dp_comm, options, pool));
//   zero->ZeroGrads();                        // not model->ZeroGrads(): that commits every page
//   zero->set_gradient_prescale(local_targets / global_targets);
//   model->Forward(tokens, targets); model->Backward();
//   double sq = zero->LocalGradSquaredNorm();  // + experts, all-reduced by the caller
//   zero->ScaleGradients(clip_coef);           // optional
//   SY_RETURN_IF_ERROR(zero->Step(lr));        // AdamW etc. on the owned shards only
// The new values reach the model with the next forward's all-gathers.
//
// Communication. Create splits a private communicator off `comm` (collective), used only by the
// communication thread, which runs every Zero3 collective in the order the hooks issue them (the
// same on every rank). With prefetch on, that thread calls MPI while the caller's thread computes:
// if the layers themselves communicate (expert parallelism), MPI must run at
// MpiThreadLevel::kMultiple. Outside Forward/Backward (after AfterBackward(0), after the last
// AfterForward, and on return from every other call here) the thread is idle, so the caller may
// use other communicators at kSerialized. With prefetch off every collective is waited for at
// once and the caller's thread never computes while the thread communicates.
//
// Ownership: the model and the backend must outlive the Zero3; it keeps non-owning pointers to
// them and to `pool`. After destruction the model's dense tensors hold zeros wherever pages were
// released: call GatherFullParameters first to keep the values.
// Thread-safety: one caller thread (the one that drives the model); the communication thread is
// internal.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "optim/optimizer_options.h"
#include "parallel/communicator.h"
#include "runtime/core/status.h"
#include "runtime/core/thread_pool.h"
#include "runtime/model/layer_hooks.h"
#include "runtime/model/moe_model.h"

namespace sy {

struct Zero3Options {
  // Gather unit u+1 (forward) or u-1 (backward) while u computes, and run reduce-scatters behind
  // the backward. Default: true.
  bool prefetch = true;
  // The optimizer of the owned shards (the trainer's options). Default: AdamW, torch defaults
  // (weight_decay 0).
  OptimizerOptions optimizer;
};

// Memory of one rank, in bytes unless named otherwise.
struct Zero3MemoryReport {
  int rank = 0;
  int world = 1;                // N
  int num_units = 0;            // dense units (embedding, layers, head)
  int64_t dense_elements = 0;   // D
  int64_t padded_elements = 0;  // sum over units of P_u (D plus padding)
  int64_t shard_elements = 0;   // owned by this rank: sum of S_u = padded_elements / N
  int64_t shard_bytes = 0;      // master + m + v + grad shards (16 * shard_elements with AdamW)
  // The page-rounded size of every dense parameter and gradient tensor: what a fully gathered
  // model holds (the single-process dense footprint is this plus the optimizer state).
  int64_t full_copy_bytes = 0;
  int64_t committed_bytes = 0;       // full-copy pages committed now (parameters + gradients)
  int64_t peak_committed_bytes = 0;  // since Create or ResetPeakMemory
  int gathered_units = 0;            // units whose full parameters are committed now
  int peak_gathered_units = 0;       // since Create or ResetPeakMemory
  // The reduce-scatter staging buffer (4 * max P_u), committed only while a reduce-scatter runs.
  int64_t staging_bytes = 0;
};

// A multi-line human-readable report ("ZeRO-3 rank 0/4: dense D=..., shards ... MiB (16 B x ...)").
std::string FormatZero3Memory(const Zero3MemoryReport& report);

// The optimizer state of one dense parameter, full size (for checkpoints).
struct DenseOptimizerState {
  std::string name;      // the parameter's name
  std::vector<float> m;  // numel elements; empty when the optimizer keeps no first moment
  std::vector<float> v;  // numel elements; empty when the optimizer keeps no second moment
  int64_t step = 0;      // optimizer steps (the same for every parameter of a unit)
  // GatherOptimizerState: the f32 master (numel elements; the parameter's value when f32).
  // LoadOptimizerState ignores it.
  std::vector<float> master = {};
};

class Zero3 final : public LayerHooks {
 public:
  // Collective over `comm` (host buffers; InvalidArgument otherwise). Takes each rank's shard from
  // the model's current dense values (every rank must hold the same values, e.g. the same
  // InitializeParameters seed), zeroes the optimizer state and releases the full copies.
  // FailedPrecondition for a model it cannot shard: forward-only, tied embeddings (the table
  // would belong to two units), values other than f32, bf16 or f16, gradients other than f32, or
  // dense tensors whose memory the backend cannot release (Backend::IsReleasable: sim; cuda
  // without ModelOptions::releasable_parameters). 16-bit values give 16-bit masters, their own
  // values: call LoadMasters with the exact ones.
  static Result<std::unique_ptr<Zero3>> Create(MoeModel& model, Communicator& comm,
                                               const Zero3Options& options, ThreadPool* pool);
  ~Zero3() override;
  Zero3(const Zero3&) = delete;
  Zero3& operator=(const Zero3&) = delete;

  // LayerHooks (called by MoeModel::Forward/Backward; see the schedule above).
  Status BeforeForward(int unit) override;
  Status AfterForward(int unit) override;
  Status BeforeBackward(int unit) override;
  Status AfterBackward(int unit) override;

  // Zeroes the owned gradient shards and every non-dense (expert) gradient of the model.
  void ZeroGrads();
  // Each rank's full gradients are multiplied by `factor` before they are summed into the shards
  // (e.g. local targets / global targets, so the sum is the global mean). Default: 1.
  void set_gradient_prescale(float factor);
  // Sum of squares of this rank's owned gradient shards (padding is zero). The global squared
  // norm of the dense gradients is its sum over the group.
  double LocalGradSquaredNorm() const;
  // Multiplies the owned gradient shards by `factor` (e.g. a clipping coefficient).
  void ScaleGradients(float factor);
  // One optimizer update of the owned shards with learning rate `lr` (each unit's step counter
  // advances). Releases any gathered full copy, which is stale afterwards.
  Status Step(double lr);

  // Collective. Gathers every unit's full parameters into the model's tensors (for saving or
  // evaluation without hooks); they stay committed until ReleaseFullParameters or the unit's next
  // AfterForward/AfterBackward.
  Status GatherFullParameters();
  // Releases every gathered full copy.
  void ReleaseFullParameters();
  // Local. Takes this rank's shard from the values the caller wrote into the model's dense tensors
  // (the same on every rank, e.g. loaded from a checkpoint), then releases the full copies.
  // On a device the tensors must hold memory when the caller writes them: GatherFullParameters
  // first. On cpu a write commits pages by itself; those are not counted in the memory report
  // meanwhile.
  Status LoadFullParameters();
  // Local. This rank's shard of every dense parameter's f32 master from `full_value(p)` (numel
  // values, the same on every rank), and of its 16-bit copy, rounded from them; releases the full
  // copies. Mixed precision's initial masters (ParameterStore::InitialValuesOf) and a resumed
  // checkpoint's.
  Status LoadMasters(const std::function<std::vector<float>(const Parameter&)>& full_value);
  // Collective. The full m, v, step and f32 master of every dense parameter, in ParameterStore
  // order.
  Result<std::vector<DenseOptimizerState>> GatherOptimizerState();
  // Local. This rank's shards of m, v and step from full states (as GatherOptimizerState returns,
  // matched by name; every dense parameter must be present). InvalidArgument for a missing
  // parameter, a wrong size, or different steps within one unit.
  Status LoadOptimizerState(std::span<const DenseOptimizerState> states);

  Zero3MemoryReport memory() const;
  void ResetPeakMemory();

  // Whether Zero3 shards `p` (every non-expert parameter).
  static bool IsDense(const Parameter& p) { return !p.is_expert; }

 private:
  struct Impl;
  explicit Zero3(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sy
