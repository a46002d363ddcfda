// ExpertParallelCompute: the ExpertCompute of one MoE layer with its experts partitioned over an
// expert-parallel (EP) group (runtime/model/expert_compute.h, Note [expert parallelism]).
//
// Ownership of experts. With E experts on an EP group of P ranks (E % P == 0), rank r owns the
// contiguous range [r*E/P, (r+1)*E/P) and registers only those experts in the ParameterStore,
// under their global ids (experts/layer{L}/expert{e}/{w_gate,w_up,w_down}, Parameter::expert = e),
// so checkpoints written by the EP ranks together hold every expert exactly once, under the same
// names a single-process model uses. ParameterStore::Initialize fills a parameter from
// (seed, name) alone, so a rank's experts get the same values as in a single-process model.
//
// Forward(xs [R, H] grouped by global expert, group_rows [E]):
//   1. counts:   AllToAll of group_rows (E/P int64 per peer) on the EP group: this rank learns how
//                many rows each source sends for each of its local experts.
//   2. dispatch: the rows for rank p are the contiguous block of p's experts in xs, so xs is sent
//                as is through AllToAll::Forward (flat or hierarchical, per the AllToAll given).
//                Received rows are ordered by source, then local expert; they are regrouped by
//                local expert (then source) for one grouped GEMM over the local experts.
//   3. compute:  LocalExpertCompute over the local experts (skipped when no row arrived; the
//                weight gradients then get exactly zero added).
//   4. combine:  the exact reverse (un-regroup, AllToAll::Reverse), so ys [R, H] holds each row's
//                output in xs's order and the MoE layer's Unpermute runs unchanged.
// Backward(d_ys) mirrors it: d_ys goes along the dispatch path (same plan), the local expert
// backward accumulates the local experts' weight gradients (they stay on their owner: no
// reduction), and d_xs comes back along the combine path.
// Every rank runs every collective of Forward and Backward, also with zero rows.
//
// Memory. The exchanges run on host buffers: rows are downloaded from the backend, exchanged and
// uploaded again (a copy on cpu; staging on sim and cuda). So the topology's world communicator
// must move host memory (mpi or local; Create returns InvalidArgument for nccl).
//
// Data parallelism of the rest of the model (router, attention, ...) is not handled here: each
// rank routes its own tokens with replicated gate weights, whose gradients the caller all-reduces.
//
// Ordering: Forward and Backward are host-synchronous. They download their input from the
// backend (synchronizing its compute stream), exchange on the calling thread, and upload the
// result on the compute stream before returning (runtime/model/host_transfer.h).
//
// Ownership: does not own the Topology or the AllToAll's communicators (they must outlive it); owns
// its local experts, the current plan and the activations until Release.
// Thread-safety: one thread at a time (the Backend's and the communicators' rules).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "parallel/all_to_all.h"
#include "parallel/topology.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/expert_compute.h"
#include "runtime/model/moe_layer.h"
#include "runtime/model/parameter_store.h"

namespace sy {

// Expert data parallelism (world > ep_size). The world of W ranks is cut into W / ep_size EP
// groups of consecutive ranks (rank w is in EP group w / ep_size, at EP rank w % ep_size); the
// ranks with the same EP rank hold the same experts and form an expert-data-parallel group. The
// dense parameters are replicated over the whole world.
struct ExpertParallelGroups {
  std::unique_ptr<Communicator> ep;         // this rank's EP group (size ep_size)
  std::unique_ptr<Communicator> expert_dp;  // the ranks holding the same experts (W / ep_size)
};
// Collective over `world`. InvalidArgument when ep_size is not a positive divisor of world.size().
Result<ExpertParallelGroups> MakeExpertParallelGroups(Communicator& world, int ep_size);

// Collective over `expert_dp`: sums the gradient of every expert parameter in `store` over the
// group (in registration order, which is the same on every rank of the group). Host-staged; call
// after Backward, before the optimizer step. A no-op for a group of one.
Status AllReduceExpertGradients(Backend& backend, ParameterStore& store, Communicator& expert_dp);

// The EP rank that owns global expert `global_expert` (0 <= it < num_experts) on an EP group of
// `ep_size` ranks: rank r owns [r*E/P, (r+1)*E/P) (above). The one place that says where an
// expert lives: ExpertParallelCompute's local range, the distributed checkpoint's gather and the
// EP shards of `switchyard convert --ep-size` all follow it. SY_CHECKs ep_size > 0,
// num_experts % ep_size == 0 and the expert's range.
int ExpertOwner(int global_expert, int num_experts, int ep_size);

struct ExpertParallelOptions {
  int num_experts = 0;       // E, over the whole EP group
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // moe_intermediate_size
  AllToAllAlgorithm algorithm = AllToAllAlgorithm::kFlat;
  // The local experts have no weights of their own: a bound LocalExpertCompute (Note [bound
  // experts] in runtime/model/expert_compute.h) that registers nothing in the store and computes
  // with what the weight source set on local() gives per Forward. Training on the expert store
  // binds each step's activated experts this way (launcher/training/expert_working_set.h).
  // Default: false (the local experts are registered and owned).
  bool bound_experts = false;
};

class ExpertParallelCompute final : public ExpertCompute {
 public:
  // Collective-free. The EP group is topology.world(). InvalidArgument when num_experts is not a
  // positive multiple of the group size or the communicator does not move host memory;
  // FailedPrecondition for a hierarchical algorithm on nodes of unequal size.
  static Result<std::unique_ptr<ExpertParallelCompute>> Create(
      Backend& backend, ParameterStore& store, const Topology& topology,
      const ExpertParallelOptions& options, int layer, DType weight_dtype, bool with_grad);

  // A factory for MoeLayer::Create (config.num_experts, hidden_size, moe_intermediate_size). It
  // keeps a pointer to `topology`, which must outlive the factory and the layers it makes.
  // `bound_experts`: as ExpertParallelOptions::bound_experts.
  static ExpertComputeFactory Factory(const Topology& topology, const ModelConfig& config,
                                      AllToAllAlgorithm algorithm, bool bound_experts = false);

  // Collective over the EP group.
  Status Forward(Backend& backend, const Tensor& xs, std::span<const int64_t> group_rows,
                 const Tensor& ys) override;
  // Collective over the EP group.
  Status Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) override;
  void Release() override;

  int first_expert() const { return first_expert_; }
  int num_local_experts() const { return num_local_; }
  LocalExpertCompute& local() { return *local_; }

 private:
  ExpertParallelCompute(AllToAll a2a, Communicator* comm) : a2a_(std::move(a2a)), comm_(comm) {}

  // Host rows by source (recv layout) <-> rows by local expert; `to_expert_order` picks the
  // direction. A row is row_bytes() bytes.
  void Regroup(const std::vector<std::byte>& src, std::vector<std::byte>& dst,
               bool to_expert_order) const;
  // Bytes of one exchanged row: hidden_ values of the step's activation dtype.
  size_t row_bytes() const { return static_cast<size_t>(hidden_) * DTypeSize(row_dtype_); }
  // Dispatch `in` (rows in the send layout) to the local experts, run their forward (or backward)
  // and combine the result back into `out`. Collective.
  Status Exchange(Backend& backend, const Tensor& in, const Tensor& out, bool backward);

  AllToAll a2a_;
  Communicator* comm_;
  int num_experts_ = 0;
  int num_local_ = 0;
  int first_expert_ = 0;
  int64_t hidden_ = 0;
  std::unique_ptr<LocalExpertCompute> local_;

  // The current step (Forward to Release).
  bool have_plan_ = false;
  std::vector<int64_t> recv_counts_;  // [P * El]: rows from source s for local expert j
  std::vector<int64_t> local_rows_;   // [El]: rows per local expert
  int64_t recv_rows_ = 0;
  // The dtype of the rows exchanged this step: the activations' (f32, or the compute dtype of
  // mixed-precision training: the all-to-all payloads are 16-bit then).
  DType row_dtype_ = DType::kF32;
  std::optional<AllToAllPlan> plan_;
  Tensor local_xs_;  // [recv_rows, H] grouped by local expert (kept for Backward)
};

}  // namespace sy
