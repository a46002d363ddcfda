// TEMPORARY: replaced by the real kernels in this session.
#include "runtime/cpu/cpu_backend.h"

namespace sy {

void CpuBackend::Fill(const Tensor& out, float value) { SY_CHECK(false) << "Fill not yet implemented"; }
void CpuBackend::Convert(const Tensor& src, const Tensor& out) { SY_CHECK(false) << "Convert not yet implemented"; }
void CpuBackend::Add(const Tensor& a, const Tensor& b, const Tensor& out) { SY_CHECK(false) << "Add not yet implemented"; }
void CpuBackend::Mul(const Tensor& a, const Tensor& b, const Tensor& out) { SY_CHECK(false) << "Mul not yet implemented"; }
void CpuBackend::Scale(const Tensor& x, float alpha, const Tensor& out) { SY_CHECK(false) << "Scale not yet implemented"; }
void CpuBackend::Axpy(float alpha, const Tensor& x, const Tensor& y) { SY_CHECK(false) << "Axpy not yet implemented"; }
void CpuBackend::AddBias(const Tensor& x, const Tensor& bias, const Tensor& out) { SY_CHECK(false) << "AddBias not yet implemented"; }
void CpuBackend::Silu(const Tensor& x, const Tensor& out) { SY_CHECK(false) << "Silu not yet implemented"; }
void CpuBackend::SiluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) { SY_CHECK(false) << "SiluBackward not yet implemented"; }
void CpuBackend::Gelu(const Tensor& x, const Tensor& out) { SY_CHECK(false) << "Gelu not yet implemented"; }
void CpuBackend::GeluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) { SY_CHECK(false) << "GeluBackward not yet implemented"; }
void CpuBackend::Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) { SY_CHECK(false) << "Swiglu not yet implemented"; }
void CpuBackend::SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate, const Tensor& dup) { SY_CHECK(false) << "SwigluBackward not yet implemented"; }

}  // namespace sy
