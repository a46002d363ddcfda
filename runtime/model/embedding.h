// Embedding: the token embedding table "embed_tokens" [vocab, hidden]; out[n] = table[ids[n]],
// and the backward that scatter-adds into the table's gradient.
//
// EmbeddingCompute is the seam through which MoeModel looks tokens up (as ExpertCompute is for
// the experts): Embedding is the default, a replacement (MoeModel::set_embedding_compute) may
// hold the table elsewhere, e.g. column-partitioned over a data-parallel group
// (parallel/embedding_partition.h).
//
// Ownership: parameter views from a ParameterStore; Forward keeps a view of ids for Backward.
// Thread-safety: as the Backend's operators (compute stream).
#pragma once

#include <cstdint>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/parameter_store.h"

namespace sy {

class EmbeddingCompute {
 public:
  virtual ~EmbeddingCompute() = default;
  // ids i32 [N] on the backend, in [0, vocab) -> out [N, hidden] (overwritten).
  virtual Status Forward(Backend& backend, const Tensor& ids, const Tensor& out) = 0;
  // dout [N, hidden] of the last Forward: accumulates into the table gradient.
  virtual Status Backward(Backend& backend, const Tensor& dout) = 0;
  // Drops what Forward kept for Backward.
  virtual void Release() = 0;
};

class Embedding final : public EmbeddingCompute {
 public:
  Embedding() = default;
  // Registers "embed_tokens" [vocab, hidden].
  static Result<Embedding> Create(Backend& backend, ParameterStore& store, int64_t vocab,
                                  int64_t hidden, DType weight_dtype, bool with_grad);

  // ids i32 [N] on the backend -> out [N, hidden].
  Status Forward(Backend& backend, const Tensor& ids, const Tensor& out) override;
  // dout [N, hidden]: accumulates into the table gradient.
  Status Backward(Backend& backend, const Tensor& dout) override;
  void Release() override { ids_ = Tensor(); }

  const Tensor& table() const { return table_; }
  const Tensor& table_grad() const { return dtable_; }

 private:
  Tensor table_, dtable_;
  Tensor ids_;
};

}  // namespace sy
