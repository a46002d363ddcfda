// TEMPORARY: replaced by the real kernels in this session.
#include "runtime/cpu/cpu_backend.h"

namespace sy {

void CpuBackend::EmbeddingGather(const Tensor& table, const Tensor& ids, const Tensor& out) { SY_CHECK(false) << "EmbeddingGather not yet implemented"; }
void CpuBackend::EmbeddingScatterAdd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) { SY_CHECK(false) << "EmbeddingScatterAdd not yet implemented"; }
void CpuBackend::GatherRows(const Tensor& src, const Tensor& indices, const Tensor& out) { SY_CHECK(false) << "GatherRows not yet implemented"; }
void CpuBackend::ScatterAddRows(const Tensor& src, const Tensor& indices, const Tensor& weights, const Tensor& out) { SY_CHECK(false) << "ScatterAddRows not yet implemented"; }

}  // namespace sy
