// TEMPORARY: replaced by the real kernels in this session.
#include "runtime/cpu/cpu_backend.h"

namespace sy {

void CpuBackend::Reduce(const Tensor& x, const Tensor& out, ReduceOp op, ReduceAxis axis) { SY_CHECK(false) << "Reduce not yet implemented"; }
void CpuBackend::Softmax(const Tensor& x, const Tensor& out) { SY_CHECK(false) << "Softmax not yet implemented"; }
void CpuBackend::SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) { SY_CHECK(false) << "SoftmaxBackward not yet implemented"; }
void CpuBackend::TopK(const Tensor& x, int k, const Tensor& values, const Tensor& indices) { SY_CHECK(false) << "TopK not yet implemented"; }
void CpuBackend::CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& losses, const Tensor& lse) { SY_CHECK(false) << "CrossEntropy not yet implemented"; }
void CpuBackend::CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& dlosses, const Tensor& dlogits) { SY_CHECK(false) << "CrossEntropyBackward not yet implemented"; }

}  // namespace sy
