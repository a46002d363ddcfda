// TEMPORARY: replaced by the real kernels in this session.
#include "runtime/cpu/cpu_backend.h"

namespace sy {

void CpuBackend::Gemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) { SY_CHECK(false) << "Gemm not yet implemented"; }
void CpuBackend::BatchedGemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) { SY_CHECK(false) << "BatchedGemm not yet implemented"; }
void CpuBackend::GroupedGemm(const Tensor& a, const Tensor& b, const Tensor& c, std::span<const int64_t> group_rows, GemmOptions options) { SY_CHECK(false) << "GroupedGemm not yet implemented"; }
void CpuBackend::GroupedGemmWeightGrad(const Tensor& x, const Tensor& dy, const Tensor& dw, std::span<const int64_t> group_rows, float beta) { SY_CHECK(false) << "GroupedGemmWeightGrad not yet implemented"; }

}  // namespace sy
