// TEMPORARY: replaced by the real kernels in this session.
#include "runtime/cpu/cpu_backend.h"

namespace sy {

void CpuBackend::Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const AttentionOptions& options) { SY_CHECK(false) << "Attention not yet implemented"; }
void CpuBackend::AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk, const Tensor& dv, const AttentionOptions& options) { SY_CHECK(false) << "AttentionBackward not yet implemented"; }

}  // namespace sy
