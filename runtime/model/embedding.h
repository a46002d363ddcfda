// Embedding: the token embedding table "embed_tokens" [vocab, hidden]; out[n] = table[ids[n]],
// and the backward that scatter-adds into the table's gradient.
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

class Embedding {
 public:
  Embedding() = default;
  // Registers "embed_tokens" [vocab, hidden].
  static Result<Embedding> Create(Backend& backend, ParameterStore& store, int64_t vocab,
                                  int64_t hidden, DType weight_dtype, bool with_grad);

  // ids i32 [N] on the backend -> out [N, hidden].
  Status Forward(Backend& backend, const Tensor& ids, const Tensor& out);
  // dout [N, hidden]: accumulates into the table gradient.
  Status Backward(Backend& backend, const Tensor& dout);
  void Release() { ids_ = Tensor(); }

  const Tensor& table() const { return table_; }
  const Tensor& table_grad() const { return dtable_; }

 private:
  Tensor table_, dtable_;
  Tensor ids_;
};

}  // namespace sy
