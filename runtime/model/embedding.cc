#include "runtime/model/embedding.h"

#include "runtime/core/check.h"

namespace sy {

Result<Embedding> Embedding::Create(Backend& backend, ParameterStore& store, int64_t vocab,
                                    int64_t hidden, DType weight_dtype, bool with_grad) {
  SY_ASSIGN_OR_RETURN(Parameter * p,
                      store.Create(backend, "embed_tokens", Shape{vocab, hidden}, weight_dtype,
                                   with_grad, /*layer=*/-1, ParamInit::kNormal));
  Embedding e;
  e.table_ = p->value;
  e.dtable_ = p->grad;
  return e;
}

Status Embedding::Forward(Backend& backend, const Tensor& ids, const Tensor& out) {
  backend.EmbeddingGather(table_, ids, out);
  ids_ = ids;
  return Status::Ok();
}

Status Embedding::Backward(Backend& backend, const Tensor& dout) {
  SY_CHECK(ids_.defined()) << "Embedding::Backward without a Forward";
  SY_CHECK(dtable_.defined()) << "Embedding::Backward on a forward-only table";
  backend.EmbeddingScatterAdd(dout, ids_, dtable_);
  return Status::Ok();
}

}  // namespace sy
