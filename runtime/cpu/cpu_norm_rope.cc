// TEMPORARY: replaced by the real kernels in this session.
#include "runtime/cpu/cpu_backend.h"

namespace sy {

void CpuBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out, const Tensor& rstd) { SY_CHECK(false) << "RmsNorm not yet implemented"; }
void CpuBackend::RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dout, const Tensor& dx, const Tensor& dweight) { SY_CHECK(false) << "RmsNormBackward not yet implemented"; }
void CpuBackend::Rope(const Tensor& x, const Tensor& positions, float theta, const Tensor& out) { SY_CHECK(false) << "Rope not yet implemented"; }
void CpuBackend::RopeBackward(const Tensor& dout, const Tensor& positions, float theta, const Tensor& dx) { SY_CHECK(false) << "RopeBackward not yet implemented"; }

}  // namespace sy
