// EmbeddingPartition: the token embedding table of a data-parallel (DP) group partitioned by
// columns (MoESys IV-C, "Embedding partition in data parallelism"; docs/parallel.md).
//
// Layout. The [V, H] table "embed_tokens" is split column-wise over the N ranks of the DP group
// (H % N == 0): rank r holds columns [r*C, (r+1)*C), C = H/N, for every token id, and the
// gradient of those columns. No rank holds the whole table and no all-reduce of the table's
// gradient is needed: each column slice's gradient is complete on its owner after Backward.
//
// Forward(ids [n] of this rank; n may differ per rank, also 0):
//   1. inputs:  AllGather of n, then AllGatherV of the ids, so every rank has every rank's ids
//               (T = sum of n over the ranks, in rank order): the paper's "all-to-all of the
//               inputs" (with a column partition every rank needs every id).
//   2. lookup:  the local [V, C] slice gathered for all T ids -> [T, C].
//   3. results: AllToAllV: the rows of rank p's ids go to p; rank p receives N pieces [n_p, C],
//               one per column slice, and assembles its own tokens' full rows [n_p, H].
// Backward(dout [n, H]):
//   1. gradients: dout (multiplied by gradient_prescale()) is cut into its N column slices
//                 [n, C]; one AllToAllV sends slice q to rank q, which receives [T, C] in the
//                 order of the forward's gathered ids.
//   2. scatter-add of those rows into the local [V, C] gradient.
// Every rank runs every collective of Forward and Backward, also with n = 0. Rank r's gradient
// slice after Backward is the sum over the group of every rank's (prescaled) contribution.
//
// In a model (InstallEmbeddingPartition): the model's "embed_tokens" Parameter is rebound to the
// slice [V, C] (Parameter::col_begin = r*C, full_cols = H), so an optimizer stepping
// model.parameters() updates the slice; the DP all-reduce of the dense gradients must skip it
// (Parameter::is_column_shard()). ParameterStore::Initialize gives a shard its columns of the
// whole parameter's values. Checkpoints hold the whole [V, H] table: GatherColumnShards (values,
// and the optimizer's m and v, which are elementwise) and TakeColumnShard convert.
//
// Memory and ordering. Exchanges run on host buffers (downloaded from the backend, exchanged,
// uploaded, as parallel/expert_parallel_compute.h), so the communicator must move host memory
// (mpi or local). Forward and Backward are host-synchronous.
//
// Ownership: does not own the communicator (it must outlive this); owns the slice, its gradient
// and, between Forward and Release, the gathered ids. Thread-safety: one thread at a time (the
// Backend's and the communicator's rules).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/embedding.h"
#include "runtime/model/moe_model.h"

namespace sy {

// Bytes this rank sent to other ranks (its own piece is not counted), summed since creation.
struct EmbeddingPartitionTraffic {
  int64_t forward_bytes = 0;   // token counts, ids and looked-up rows
  int64_t backward_bytes = 0;  // gradient column slices
};

class EmbeddingPartition final : public EmbeddingCompute {
 public:
  // Collective-free. Allocates this rank's [vocab, hidden / comm.size()] slice (uninitialised) in
  // `dtype` (f32, or the compute dtype of mixed precision, bf16 or f16: the looked-up rows then
  // cross the network in it) and, when with_grad, its f32 gradient. InvalidArgument when hidden
  // is not a positive multiple of the group size (naming both) or the communicator does not move
  // host memory.
  static Result<std::unique_ptr<EmbeddingPartition>> Create(Backend& backend, Communicator& comm,
                                                            int64_t vocab, int64_t hidden,
                                                            bool with_grad,
                                                            DType dtype = DType::kF32);

  // Collective over the group. ids i32 [n] on the backend -> out [n, hidden] (overwritten).
  Status Forward(Backend& backend, const Tensor& ids, const Tensor& out) override;
  // Collective over the group. dout [n, hidden] of the last Forward: accumulates into the
  // gradient slices of the whole group (see the header comment).
  Status Backward(Backend& backend, const Tensor& dout) override;
  void Release() override;

  // Each rank's dout is multiplied by `factor` before it is sent (e.g. local targets / global
  // targets, so that the gradient is the global mean loss's). Default: 1.
  void set_gradient_prescale(float factor) { prescale_ = factor; }
  float gradient_prescale() const { return prescale_; }

  const Tensor& table() const { return table_; }        // [vocab, cols()]
  const Tensor& table_grad() const { return dtable_; }  // f32 [vocab, cols()] or undefined
  int64_t col_begin() const { return comm_->rank() * cols_; }
  int64_t cols() const { return cols_; }
  int64_t vocab() const { return vocab_; }
  int64_t hidden() const { return cols_ * comm_->size(); }
  Communicator& communicator() { return *comm_; }
  const EmbeddingPartitionTraffic& traffic() const { return traffic_; }

 private:
  EmbeddingPartition(Communicator* comm, int64_t vocab, int64_t cols)
      : comm_(comm), vocab_(vocab), cols_(cols) {}
  // Forward's exchange: the local columns of the `total` gathered ids (all_ids_) go back to
  // their ranks as elements of the table's storage type T, and `out` receives this rank's rows.
  template <typename T>
  Status ExchangeRows(Backend& backend, size_t total, const Tensor& out);

  Communicator* comm_;
  int64_t vocab_ = 0;
  int64_t cols_ = 0;
  float prescale_ = 1.0f;
  Tensor table_, dtable_;
  EmbeddingPartitionTraffic traffic_;

  // The current step (Forward to Release).
  bool have_forward_ = false;
  int64_t local_tokens_ = 0;    // n
  std::vector<size_t> counts_;  // tokens per rank
  std::vector<size_t> displs_;  // first token of each rank in the gathered ids
  Tensor all_ids_;              // i32 [T] on the backend (undefined when T == 0)
};

// Installs an EmbeddingPartition over `comm` (the DP group) into `model`: takes this rank's
// columns from the model's current table (every rank must hold the same values, e.g. the same
// InitializeParameters seed), rebinds the "embed_tokens" parameter to the slice and replaces the
// model's embedding compute, which frees the whole table. Returns the partition, owned by the
// model. Collective-free. FailedPrecondition for tied embeddings (the LM head would need the whole
// table); InvalidArgument as Create, or for a table that is not f32.
Result<EmbeddingPartition*> InstallEmbeddingPartition(MoeModel& model, Communicator& comm);

// Collective over `comm` (host memory): every rank's column shard [rows, full_cols / size] ->
// the whole [rows, full_cols] (row-major) on every rank. For checkpoints: the table, and the
// optimizer's m and v of the slice.
Result<std::vector<float>> GatherColumnShards(Communicator& comm, int64_t rows, int64_t full_cols,
                                              std::span<const float> shard);
// Local: rank `rank` of `size`'s columns of a whole [rows, full_cols] (row-major) tensor.
std::vector<float> TakeColumnShard(int rank, int size, int64_t rows, int64_t full_cols,
                                   std::span<const float> full);

}  // namespace sy
