// The CUDA backend's operators other than GEMM: operand checks on the host, then one or two kernel
// launches on the compute stream (runtime/cuda/*.cu). Nothing here synchronizes.
#include <algorithm>
#include <bit>
#include <climits>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/cuda/attention.cuh"
#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.cuh"
#include "runtime/cuda/index.cuh"
#include "runtime/cuda/norm_rope.cuh"
#include "runtime/cuda/reduce.cuh"
#include "runtime/cuda/topk.cuh"

namespace sy {
namespace {

bool Present(const Tensor& t) { return t.data() != nullptr; }

cuda::FloatType ToFloatType(DType dtype, const char* what) {
  switch (dtype) {
    case DType::kF32:
      return cuda::FloatType::kF32;
    case DType::kBF16:
      return cuda::FloatType::kBF16;
    case DType::kF16:
      return cuda::FloatType::kF16;
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kI8:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kF64:
      break;
  }
  SY_CHECK(false) << what << ": dtype " << DTypeName(dtype) << " (expected f32, bf16 or f16)";
  return cuda::FloatType::kF32;
}

// A floating-point operand of a kernel (Note [16-bit operands]): f32, bf16 or f16, checked.
cuda::FloatIn In(const Tensor& t, const char* what) {
  return {t.data(), ToFloatType(t.dtype(), what)};
}
cuda::FloatOut Out(const Tensor& t, const char* what) {
  return {t.data(), ToFloatType(t.dtype(), what)};
}

void CheckDType(const Tensor& t, DType dtype, const char* what) {
  SY_CHECK(t.dtype() == dtype) << what << ": " << t.ToString() << " must be " << DTypeName(dtype);
}

void CheckNumel(const Tensor& t, int64_t numel, const char* what) {
  SY_CHECK_EQ(t.numel(), numel) << what << ": " << t.ToString() << " has the wrong size";
}

// x viewed as [rows, last dim].
struct RowView {
  int64_t rows;
  int64_t cols;
};
RowView LastDimView(const Tensor& x, const char* what) {
  SY_CHECK_GE(x.rank(), 1) << what << ": a scalar has no last dimension";
  const int64_t cols = x.dim(x.rank() - 1);
  int64_t rows = 1;
  for (int i = 0; i + 1 < x.rank(); ++i) rows *= x.dim(i);
  return {rows, cols};
}

void CheckRowsFitGrid(int64_t rows, const char* what) {
  SY_CHECK_LE(rows, int64_t{INT_MAX}) << what << ": too many rows for one launch";
}

}  // namespace

// ---- elementwise ----

void CudaBackend::Fill(const Tensor& out, float value) {
  CheckOperand(out, "Fill out");
  uint64_t bits = 0;
  switch (out.dtype()) {
    case DType::kF32:
      bits = std::bit_cast<uint32_t>(value);
      break;
    case DType::kBF16:
      bits = F32ToBF16(value).bits;
      break;
    case DType::kF16:
      bits = F32ToF16(value).bits;
      break;
    case DType::kI32:
      bits = static_cast<uint32_t>(static_cast<int32_t>(value));
      break;
    case DType::kI64:
      bits = static_cast<uint64_t>(static_cast<int64_t>(value));
      break;
    case DType::kU8:
      bits = static_cast<uint8_t>(value);
      break;
    case DType::kI8:
      bits = static_cast<uint8_t>(static_cast<int8_t>(value));
      break;
    case DType::kF64:
      bits = std::bit_cast<uint64_t>(static_cast<double>(value));
      break;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      SY_CHECK(false) << "Fill of a quantized " << out.ToString();
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchFill(out.data(), static_cast<int>(DTypeSize(out.dtype())), bits, out.numel(),
                   stream());
}

void CudaBackend::Convert(const Tensor& src, const Tensor& out) {
  CheckOperand(src, "Convert src");
  CheckOperand(out, "Convert out");
  CheckNumel(out, src.numel(), "Convert out");
  const cuda::FloatType from = ToFloatType(src.dtype(), "Convert src");
  const cuda::FloatType to = ToFloatType(out.dtype(), "Convert out");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchConvert(src.data(), from, out.data(), to, src.numel(), stream());
}

// Every elementwise operand is f32, bf16 or f16 independently (In/Out check the dtype); the
// launchers pick the f32 kernel or the runtime-typed one.

void CudaBackend::Add(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out}) {
    CheckOperand(*t, "Add");
    CheckNumel(*t, a.numel(), "Add");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchBinary(cuda::BinaryOp::kAdd, In(a, "Add a"), In(b, "Add b"), Out(out, "Add out"),
                     a.numel(), stream());
}

void CudaBackend::Mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out}) {
    CheckOperand(*t, "Mul");
    CheckNumel(*t, a.numel(), "Mul");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchBinary(cuda::BinaryOp::kMul, In(a, "Mul a"), In(b, "Mul b"), Out(out, "Mul out"),
                     a.numel(), stream());
}

void CudaBackend::Scale(const Tensor& x, float alpha, const Tensor& out) {
  for (const Tensor* t : {&x, &out}) {
    CheckOperand(*t, "Scale");
    CheckNumel(*t, x.numel(), "Scale");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchScale(In(x, "Scale x"), alpha, Out(out, "Scale out"), x.numel(), stream());
}

void CudaBackend::Axpy(float alpha, const Tensor& x, const Tensor& y) {
  for (const Tensor* t : {&x, &y}) {
    CheckOperand(*t, "Axpy");
    CheckNumel(*t, x.numel(), "Axpy");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchAxpy(alpha, In(x, "Axpy x"), Out(y, "Axpy y"), x.numel(), stream());
}

void CudaBackend::AddBias(const Tensor& x, const Tensor& bias, const Tensor& out) {
  for (const Tensor* t : {&x, &bias, &out}) CheckOperand(*t, "AddBias");
  const RowView view = LastDimView(x, "AddBias x");
  CheckNumel(bias, view.cols, "AddBias bias");
  CheckNumel(out, x.numel(), "AddBias out");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchAddBias(In(x, "AddBias x"), In(bias, "AddBias bias"), Out(out, "AddBias out"),
                      view.rows, view.cols, stream());
}

namespace {

// The operand checks of a unary activation and of its backward.
void CheckUnary(const Tensor& x, const Tensor& out, const char* what) {
  for (const Tensor* t : {&x, &out}) CheckNumel(*t, x.numel(), what);
}

}  // namespace

void CudaBackend::Silu(const Tensor& x, const Tensor& out) {
  CheckOperand(x, "Silu x");
  CheckOperand(out, "Silu out");
  CheckUnary(x, out, "Silu");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchActivation(cuda::Activation::kSilu, In(x, "Silu x"), Out(out, "Silu out"), x.numel(),
                         stream());
}

void CudaBackend::SiluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  for (const Tensor* t : {&x, &dout, &dx}) {
    CheckOperand(*t, "SiluBackward");
    CheckNumel(*t, x.numel(), "SiluBackward");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchActivationBackward(cuda::Activation::kSilu, In(x, "SiluBackward x"),
                                 In(dout, "SiluBackward dout"), Out(dx, "SiluBackward dx"),
                                 x.numel(), stream());
}

void CudaBackend::Gelu(const Tensor& x, const Tensor& out) {
  CheckOperand(x, "Gelu x");
  CheckOperand(out, "Gelu out");
  CheckUnary(x, out, "Gelu");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchActivation(cuda::Activation::kGelu, In(x, "Gelu x"), Out(out, "Gelu out"), x.numel(),
                         stream());
}

void CudaBackend::GeluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  for (const Tensor* t : {&x, &dout, &dx}) {
    CheckOperand(*t, "GeluBackward");
    CheckNumel(*t, x.numel(), "GeluBackward");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchActivationBackward(cuda::Activation::kGelu, In(x, "GeluBackward x"),
                                 In(dout, "GeluBackward dout"), Out(dx, "GeluBackward dx"),
                                 x.numel(), stream());
}

void CudaBackend::Relu(const Tensor& x, const Tensor& out) {
  CheckOperand(x, "Relu x");
  CheckOperand(out, "Relu out");
  CheckUnary(x, out, "Relu");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchActivation(cuda::Activation::kRelu, In(x, "Relu x"), Out(out, "Relu out"), x.numel(),
                         stream());
}

void CudaBackend::ReluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) {
  for (const Tensor* t : {&x, &dout, &dx}) {
    CheckOperand(*t, "ReluBackward");
    CheckNumel(*t, x.numel(), "ReluBackward");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchActivationBackward(cuda::Activation::kRelu, In(x, "ReluBackward x"),
                                 In(dout, "ReluBackward dout"), Out(dx, "ReluBackward dx"),
                                 x.numel(), stream());
}

void CudaBackend::Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  for (const Tensor* t : {&gate, &up, &out}) {
    CheckOperand(*t, "Swiglu");
    CheckNumel(*t, gate.numel(), "Swiglu");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchSwiglu(In(gate, "Swiglu gate"), In(up, "Swiglu up"), Out(out, "Swiglu out"),
                     gate.numel(), stream());
}

void CudaBackend::SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout,
                                 const Tensor& dgate, const Tensor& dup) {
  for (const Tensor* t : {&gate, &up, &dout, &dgate, &dup}) {
    CheckOperand(*t, "SwigluBackward");
    CheckNumel(*t, gate.numel(), "SwigluBackward");
  }
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchSwigluBackward(In(gate, "SwigluBackward gate"), In(up, "SwigluBackward up"),
                             In(dout, "SwigluBackward dout"), Out(dgate, "SwigluBackward dgate"),
                             Out(dup, "SwigluBackward dup"), gate.numel(), stream());
}

// ---- reductions, softmax, top-k, cross-entropy ----

void CudaBackend::Reduce(const Tensor& x, const Tensor& out, ReduceOp op, ReduceAxis axis) {
  CheckOperand(x, "Reduce x");
  CheckOperand(out, "Reduce out");
  const cuda::FloatIn x_in = In(x, "Reduce x");
  const cuda::FloatOut out_w = Out(out, "Reduce out");
  cuda::ReduceKind kind = cuda::ReduceKind::kSum;
  switch (op) {
    case ReduceOp::kSum:
      kind = cuda::ReduceKind::kSum;
      break;
    case ReduceOp::kMean:
      kind = cuda::ReduceKind::kMean;
      break;
    case ReduceOp::kMax:
      kind = cuda::ReduceKind::kMax;
      break;
    case ReduceOp::kSumSquares:
      kind = cuda::ReduceKind::kSumSquares;
      break;
  }
  ScopedCudaDevice guard(info_.index);
  switch (axis) {
    case ReduceAxis::kLast: {
      const RowView view = LastDimView(x, "Reduce x");
      CheckNumel(out, view.rows, "Reduce(kLast) out");
      CheckRowsFitGrid(view.rows, "Reduce");
      cuda::LaunchReduceRows(x_in, view.rows, view.cols, kind, out_w, stream());
      return;
    }
    case ReduceAxis::kFirst: {
      SY_CHECK_GE(x.rank(), 1) << "Reduce(kFirst) of a scalar";
      const int64_t rows = x.dim(0);
      int64_t cols = 1;
      for (int i = 1; i < x.rank(); ++i) cols *= x.dim(i);
      CheckNumel(out, cols, "Reduce(kFirst) out");
      Scratch scratch(*this);
      float* workspace = scratch.Get<float>(cuda::ReduceColumnsWorkspaceFloats(rows, cols));
      // The column reduction writes f32: a 16-bit out is reduced into scratch and rounded once.
      const bool wide = out_w.type == cuda::FloatType::kF32;
      float* out32 = wide ? out.data<float>() : scratch.Get<float>(cols);
      cuda::LaunchReduceColumns(x_in, rows, cols, kind, workspace, out32, stream());
      if (!wide) {
        cuda::LaunchConvert(out32, cuda::FloatType::kF32, out_w.data, out_w.type, cols, stream());
      }
      return;
    }
  }
}

void CudaBackend::Softmax(const Tensor& x, const Tensor& out) {
  for (const Tensor* t : {&x, &out}) {
    CheckOperand(*t, "Softmax");
    CheckNumel(*t, x.numel(), "Softmax");
  }
  const RowView view = LastDimView(x, "Softmax x");
  CheckRowsFitGrid(view.rows, "Softmax");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchSoftmax(In(x, "Softmax x"), view.rows, view.cols, Out(out, "Softmax out"), stream());
}

void CudaBackend::SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  for (const Tensor* t : {&y, &dy, &dx}) {
    CheckOperand(*t, "SoftmaxBackward");
    CheckNumel(*t, y.numel(), "SoftmaxBackward");
  }
  const RowView view = LastDimView(y, "SoftmaxBackward y");
  CheckRowsFitGrid(view.rows, "SoftmaxBackward");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchSoftmaxBackward(In(y, "SoftmaxBackward y"), In(dy, "SoftmaxBackward dy"), view.rows,
                              view.cols, Out(dx, "SoftmaxBackward dx"), stream());
}

void CudaBackend::TopK(const Tensor& x, int k, const Tensor& values, const Tensor& indices) {
  CheckOperand(x, "TopK x");
  CheckOperand(values, "TopK values");
  CheckOperand(indices, "TopK indices");
  const cuda::FloatIn x_in = In(x, "TopK x");
  CheckDType(values, DType::kF32, "TopK values");
  CheckDType(indices, DType::kI32, "TopK indices");
  const RowView view = LastDimView(x, "TopK x");
  SY_CHECK(k >= 0 && k <= view.cols) << "TopK: k = " << k << " for rows of " << view.cols;
  SY_CHECK_LE(view.cols, int64_t{INT_MAX}) << "TopK: rows too long for i32 indices";
  CheckNumel(values, view.rows * k, "TopK values");
  CheckNumel(indices, view.rows * k, "TopK indices");
  CheckRowsFitGrid(view.rows, "TopK");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchTopK(x_in, view.rows, view.cols, k, values.data<float>(), indices.data<int32_t>(),
                   stream());
}

void CudaBackend::CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                               const Tensor& lse) {
  CheckOperand(logits, "CrossEntropy logits");
  CheckOperand(targets, "CrossEntropy targets");
  CheckOperand(losses, "CrossEntropy losses");
  const cuda::FloatIn logits_in = In(logits, "CrossEntropy logits");
  CheckDType(targets, DType::kI32, "CrossEntropy targets");
  CheckDType(losses, DType::kF32, "CrossEntropy losses");
  const RowView view = LastDimView(logits, "CrossEntropy logits");
  CheckNumel(targets, view.rows, "CrossEntropy targets");
  CheckNumel(losses, view.rows, "CrossEntropy losses");
  if (Present(lse)) {
    CheckOperand(lse, "CrossEntropy lse");
    CheckDType(lse, DType::kF32, "CrossEntropy lse");
    CheckNumel(lse, view.rows, "CrossEntropy lse");
  }
  CheckRowsFitGrid(view.rows, "CrossEntropy");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchCrossEntropy(logits_in, targets.data<int32_t>(), view.rows, view.cols,
                           losses.data<float>(), Present(lse) ? lse.data<float>() : nullptr,
                           stream());
}

void CudaBackend::CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                                       const Tensor& lse, const Tensor& dlosses,
                                       const Tensor& dlogits) {
  CheckOperand(logits, "CrossEntropyBackward logits");
  CheckOperand(targets, "CrossEntropyBackward targets");
  CheckOperand(lse, "CrossEntropyBackward lse");
  CheckOperand(dlosses, "CrossEntropyBackward dlosses");
  CheckOperand(dlogits, "CrossEntropyBackward dlogits");
  const cuda::FloatIn logits_in = In(logits, "CrossEntropyBackward logits");
  CheckDType(targets, DType::kI32, "CrossEntropyBackward targets");
  CheckDType(lse, DType::kF32, "CrossEntropyBackward lse");
  const cuda::FloatIn dlosses_in = In(dlosses, "CrossEntropyBackward dlosses");
  const cuda::FloatOut dlogits_out = Out(dlogits, "CrossEntropyBackward dlogits");
  const RowView view = LastDimView(logits, "CrossEntropyBackward logits");
  CheckNumel(targets, view.rows, "CrossEntropyBackward targets");
  CheckNumel(lse, view.rows, "CrossEntropyBackward lse");
  CheckNumel(dlosses, view.rows, "CrossEntropyBackward dlosses");
  CheckNumel(dlogits, logits.numel(), "CrossEntropyBackward dlogits");
  CheckRowsFitGrid(view.rows, "CrossEntropyBackward");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchCrossEntropyBackward(logits_in, targets.data<int32_t>(), lse.data<float>(),
                                   dlosses_in, view.rows, view.cols, dlogits_out, stream());
}

// ---- normalisation and rotary embedding ----

void CudaBackend::RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
                          const Tensor& rstd) {
  CheckOperand(x, "RmsNorm x");
  CheckOperand(weight, "RmsNorm weight");
  CheckOperand(out, "RmsNorm out");
  const cuda::FloatIn x_in = In(x, "RmsNorm x");
  const cuda::FloatOut out_w = Out(out, "RmsNorm out");
  const RowView view = LastDimView(x, "RmsNorm x");
  CheckNumel(weight, view.cols, "RmsNorm weight");
  CheckNumel(out, x.numel(), "RmsNorm out");
  if (Present(rstd)) {
    CheckOperand(rstd, "RmsNorm rstd");
    CheckDType(rstd, DType::kF32, "RmsNorm rstd");
    CheckNumel(rstd, view.rows, "RmsNorm rstd");
  }
  const cuda::FloatType weight_type = ToFloatType(weight.dtype(), "RmsNorm weight");
  CheckRowsFitGrid(view.rows, "RmsNorm");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchRmsNorm(x_in, weight.data(), weight_type, view.rows, view.cols, eps, out_w,
                      Present(rstd) ? rstd.data<float>() : nullptr, stream());
}

void CudaBackend::RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                  const Tensor& dout, const Tensor& dx, const Tensor& dweight) {
  CheckOperand(x, "RmsNormBackward x");
  CheckOperand(weight, "RmsNormBackward weight");
  SY_CHECK(Present(rstd)) << "RmsNormBackward needs the rstd saved by RmsNorm";
  CheckOperand(rstd, "RmsNormBackward rstd");
  CheckOperand(dout, "RmsNormBackward dout");
  CheckOperand(dx, "RmsNormBackward dx");
  CheckOperand(dweight, "RmsNormBackward dweight");
  for (const Tensor* t : {&rstd, &dweight}) CheckDType(*t, DType::kF32, "RmsNormBackward");
  const cuda::FloatIn x_in = In(x, "RmsNormBackward x");
  const cuda::FloatIn dout_in = In(dout, "RmsNormBackward dout");
  const cuda::FloatOut dx_out = Out(dx, "RmsNormBackward dx");
  const RowView view = LastDimView(x, "RmsNormBackward x");
  CheckNumel(weight, view.cols, "RmsNormBackward weight");
  CheckNumel(rstd, view.rows, "RmsNormBackward rstd");
  CheckNumel(dout, x.numel(), "RmsNormBackward dout");
  CheckNumel(dx, x.numel(), "RmsNormBackward dx");
  CheckNumel(dweight, view.cols, "RmsNormBackward dweight");
  const cuda::FloatType weight_type = ToFloatType(weight.dtype(), "RmsNormBackward weight");
  CheckRowsFitGrid(view.rows, "RmsNormBackward");
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  float* workspace = scratch.Get<float>(cuda::RmsNormBackwardWorkspaceFloats(view.rows, view.cols));
  cuda::LaunchRmsNormBackward(x_in, weight.data(), weight_type, rstd.data<float>(), dout_in,
                              view.rows, view.cols, dx_out, dweight.data<float>(), workspace,
                              stream());
}

namespace {

void CheckRope(const Tensor& x, const Tensor& positions, const RopeOptions& rope, const Tensor& out,
               const char* what) {
  SY_CHECK_EQ(x.rank(), 3) << what << ": x must be [T,H,D], got " << x.ToString();
  const int64_t rotary = rope.RotaryDim(x.dim(2));
  SY_CHECK(rotary > 0 && rotary % 2 == 0 && rotary <= x.dim(2))
      << what << ": rotary dim " << rotary << " must be even and within the head of "
      << x.ToString();
  (void)ToFloatType(x.dtype(), what);
  (void)ToFloatType(out.dtype(), what);
  CheckDType(positions, DType::kI32, what);
  CheckNumel(positions, x.dim(0), what);
  CheckNumel(out, x.numel(), what);
  CheckRowsFitGrid(x.dim(0), what);
}

}  // namespace

void CudaBackend::Rope(const Tensor& x, const Tensor& positions, const RopeOptions& rope,
                       const Tensor& out) {
  CheckOperand(x, "Rope x");
  CheckOperand(positions, "Rope positions");
  CheckOperand(out, "Rope out");
  CheckRope(x, positions, rope, out, "Rope");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchRope(In(x, "Rope x"), positions.data<int32_t>(), x.dim(0), x.dim(1), x.dim(2),
                   rope.RotaryDim(x.dim(2)), rope.theta, /*backward=*/false, Out(out, "Rope out"),
                   stream());
}

void CudaBackend::RopeBackward(const Tensor& dout, const Tensor& positions, const RopeOptions& rope,
                               const Tensor& dx) {
  CheckOperand(dout, "RopeBackward dout");
  CheckOperand(positions, "RopeBackward positions");
  CheckOperand(dx, "RopeBackward dx");
  CheckRope(dout, positions, rope, dx, "RopeBackward");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchRope(In(dout, "RopeBackward dout"), positions.data<int32_t>(), dout.dim(0),
                   dout.dim(1), dout.dim(2), rope.RotaryDim(dout.dim(2)), rope.theta,
                   /*backward=*/true, Out(dx, "RopeBackward dx"), stream());
}

// ---- attention ----

namespace {

// Checks the attention operands and fills `shape` and `kv_lens` (one entry per batch entry).
void CheckAttention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                    const Tensor& lse, const AttentionOptions& options, size_t shared_needed,
                    size_t shared_optin, const char* what, cuda::AttentionShape* shape,
                    std::vector<int32_t>* kv_lens) {
  SY_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4)
      << what << ": q [B,T,Hq,D], k and v [B,S,Hkv,D]; got q " << q.ToString() << ", k "
      << k.ToString() << ", v " << v.ToString();
  // q, k, v and out: each f32, bf16 or f16.
  for (const Tensor* t : {&q, &k, &v, &out}) (void)ToFloatType(t->dtype(), what);
  SY_CHECK(k.shape() == v.shape()) << what << ": k " << k.ToString() << " vs v " << v.ToString();
  SY_CHECK(out.shape() == q.shape())
      << what << ": out " << out.ToString() << " vs q " << q.ToString();
  shape->batch = q.dim(0);
  shape->q_len = q.dim(1);
  shape->q_heads = q.dim(2);
  shape->head_dim = q.dim(3);
  shape->kv_len = k.dim(1);
  shape->kv_heads = k.dim(2);
  shape->scale = options.scale;
  SY_CHECK(k.dim(0) == shape->batch && k.dim(3) == shape->head_dim)
      << what << ": q " << q.ToString() << " and k " << k.ToString() << " disagree on B or D";
  SY_CHECK(shape->kv_heads > 0 && shape->q_heads % shape->kv_heads == 0)
      << what << ": Hq = " << shape->q_heads << " must be a multiple of Hkv = " << shape->kv_heads;
  SY_CHECK_LE(shape->kv_heads, int64_t{65535}) << what << ": too many kv heads";
  if (Present(lse)) {
    CheckDType(lse, DType::kF32, what);
    CheckNumel(lse, shape->batch * shape->q_heads * shape->q_len, what);
  }
  kv_lens->assign(static_cast<size_t>(shape->batch), static_cast<int32_t>(shape->kv_len));
  SY_CHECK_LE(shape->kv_len, int64_t{INT32_MAX}) << what << ": S too large";
  if (!options.kv_lens.empty()) {
    SY_CHECK_EQ(static_cast<int64_t>(options.kv_lens.size()), shape->batch)
        << what << ": one kv_lens entry per batch entry";
    *kv_lens = options.kv_lens;
  }
  for (int32_t len : *kv_lens) {
    SY_CHECK(len >= shape->q_len && len <= shape->kv_len)
        << what << ": kv_len " << len << " must lie in [T, S] = [" << shape->q_len << ", "
        << shape->kv_len << "]";
  }
  SY_CHECK_LE(shared_needed, shared_optin)
      << what << ": head dim " << shape->head_dim << " needs " << shared_needed
      << " bytes of shared memory per block; this device allows " << shared_optin;
}

}  // namespace

void CudaBackend::Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const AttentionOptions& options) {
  CheckOperand(q, "Attention q");
  CheckOperand(k, "Attention k");
  CheckOperand(v, "Attention v");
  CheckOperand(out, "Attention out");
  if (Present(lse)) CheckOperand(lse, "Attention lse");
  cuda::AttentionShape shape;
  std::vector<int32_t> kv_lens;
  SY_CHECK_EQ(q.rank(), 4) << "Attention: q must be [B,T,Hq,D], got " << q.ToString();
  CheckAttention(q, k, v, out, lse, options, cuda::AttentionForwardSharedBytes(q.dim(3)),
                 info_.shared_memory_optin, "Attention", &shape, &kv_lens);
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchAttention(In(q, "Attention q"), In(k, "Attention k"), In(v, "Attention v"),
                        Out(out, "Attention out"), Present(lse) ? lse.data<float>() : nullptr,
                        shape, kv_lens.data(), stream());
}

void CudaBackend::AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const AttentionOptions& options) {
  for (const Tensor* t : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) {
    CheckOperand(*t, "AttentionBackward");
  }
  if (Present(lse)) CheckOperand(lse, "AttentionBackward lse");
  cuda::AttentionShape shape;
  std::vector<int32_t> kv_lens;
  SY_CHECK_EQ(q.rank(), 4) << "AttentionBackward: q must be [B,T,Hq,D], got " << q.ToString();
  const size_t shared = std::max(cuda::AttentionBackwardSharedBytes(q.dim(3)),
                                 cuda::AttentionForwardSharedBytes(q.dim(3)));
  CheckAttention(q, k, v, out, lse, options, shared, info_.shared_memory_optin, "AttentionBackward",
                 &shape, &kv_lens);
  const cuda::FloatIn q_in = In(q, "AttentionBackward q");
  const cuda::FloatIn k_in = In(k, "AttentionBackward k");
  const cuda::FloatIn v_in = In(v, "AttentionBackward v");
  const cuda::FloatIn out_in = In(out, "AttentionBackward out");
  const cuda::FloatIn dout_in = In(dout, "AttentionBackward dout");
  const cuda::FloatOut dq_out = Out(dq, "AttentionBackward dq");
  const cuda::FloatOut dk_out = Out(dk, "AttentionBackward dk");
  const cuda::FloatOut dv_out = Out(dv, "AttentionBackward dv");
  SY_CHECK(dout.shape() == q.shape() && dq.shape() == q.shape())
      << "AttentionBackward: dout " << dout.ToString() << " and dq " << dq.ToString()
      << " must match q " << q.ToString();
  SY_CHECK(dk.shape() == k.shape() && dv.shape() == k.shape())
      << "AttentionBackward: dk " << dk.ToString() << " and dv " << dv.ToString()
      << " must match k " << k.ToString();
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  const float* lse_data = Present(lse) ? lse.data<float>() : nullptr;
  if (lse_data == nullptr) {
    // No saved lse: recompute it with a forward pass into scratch (the output goes to scratch too,
    // the caller's `out` is an input here).
    const int64_t rows = shape.batch * shape.q_heads * shape.q_len;
    float* lse_scratch = scratch.Get<float>(rows);
    float* out_scratch = scratch.Get<float>(q.numel());
    cuda::LaunchAttention(q_in, k_in, v_in, {out_scratch, cuda::FloatType::kF32}, lse_scratch,
                          shape, kv_lens.data(), stream());
    lse_data = lse_scratch;
  }
  float* workspace = scratch.Get<float>(cuda::AttentionBackwardWorkspaceFloats(shape));
  cuda::LaunchAttentionBackward(q_in, k_in, v_in, out_in, lse_data, dout_in, dq_out, dk_out, dv_out,
                                shape, kv_lens.data(), workspace, stream());
}

// ---- embeddings and row permutations ----

void CudaBackend::EmbeddingGather(const Tensor& table, const Tensor& ids, const Tensor& out) {
  CheckOperand(table, "EmbeddingGather table");
  CheckOperand(ids, "EmbeddingGather ids");
  CheckOperand(out, "EmbeddingGather out");
  SY_CHECK_EQ(table.rank(), 2) << "EmbeddingGather: table must be [V,H], got " << table.ToString();
  CheckDType(ids, DType::kI32, "EmbeddingGather ids");
  CheckNumel(out, ids.numel() * table.dim(1), "EmbeddingGather out");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchEmbeddingGather(In(table, "EmbeddingGather table"), table.dim(0), ids.data<int32_t>(),
                              ids.numel(), table.dim(1), Out(out, "EmbeddingGather out"), stream());
}

void CudaBackend::EmbeddingScatterAdd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  CheckOperand(dout, "EmbeddingScatterAdd dout");
  CheckOperand(ids, "EmbeddingScatterAdd ids");
  CheckOperand(dtable, "EmbeddingScatterAdd dtable");
  SY_CHECK_EQ(dtable.rank(), 2) << "EmbeddingScatterAdd: dtable must be [V,H], got "
                                << dtable.ToString();
  const cuda::FloatIn dout_in = In(dout, "EmbeddingScatterAdd dout");
  CheckDType(ids, DType::kI32, "EmbeddingScatterAdd ids");
  const cuda::FloatOut dtable_out = Out(dtable, "EmbeddingScatterAdd dtable");
  CheckNumel(dout, ids.numel() * dtable.dim(1), "EmbeddingScatterAdd dout");
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  const size_t workspace = cuda::ScatterAddWorkspaceBytes(ids.numel(), dtable.dim(0));
  cuda::LaunchEmbeddingScatterAdd(
      dout_in, ids.data<int32_t>(), ids.numel(), dtable.dim(1), dtable_out, dtable.dim(0),
      workspace > 0 ? scratch.GetBytes(workspace) : nullptr, workspace, stream());
}

void CudaBackend::GatherRows(const Tensor& src, const Tensor& indices, const Tensor& out) {
  CheckOperand(src, "GatherRows src");
  CheckOperand(indices, "GatherRows indices");
  CheckOperand(out, "GatherRows out");
  SY_CHECK_EQ(src.rank(), 2) << "GatherRows: src must be [N,H], got " << src.ToString();
  const cuda::FloatIn src_in = In(src, "GatherRows src");
  CheckDType(indices, DType::kI32, "GatherRows indices");
  const cuda::FloatOut out_w = Out(out, "GatherRows out");
  CheckNumel(out, indices.numel() * src.dim(1), "GatherRows out");
  ScopedCudaDevice guard(info_.index);
  cuda::LaunchGatherRows(src_in, src.dim(0), indices.data<int32_t>(), indices.numel(), src.dim(1),
                         out_w, stream());
}

void CudaBackend::ScatterAddRows(const Tensor& src, const Tensor& indices, const Tensor& weights,
                                 const Tensor& out) {
  CheckOperand(src, "ScatterAddRows src");
  CheckOperand(indices, "ScatterAddRows indices");
  CheckOperand(out, "ScatterAddRows out");
  SY_CHECK_EQ(out.rank(), 2) << "ScatterAddRows: out must be [N,H], got " << out.ToString();
  const cuda::FloatIn src_in = In(src, "ScatterAddRows src");
  CheckDType(indices, DType::kI32, "ScatterAddRows indices");
  const cuda::FloatOut out_w = Out(out, "ScatterAddRows out");
  CheckNumel(src, indices.numel() * out.dim(1), "ScatterAddRows src");
  if (Present(weights)) {
    CheckOperand(weights, "ScatterAddRows weights");
    CheckDType(weights, DType::kF32, "ScatterAddRows weights");
    CheckNumel(weights, indices.numel(), "ScatterAddRows weights");
  }
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  const size_t workspace = cuda::ScatterAddWorkspaceBytes(indices.numel(), out.dim(0));
  cuda::LaunchScatterAddRows(
      src_in, indices.data<int32_t>(), Present(weights) ? weights.data<float>() : nullptr,
      indices.numel(), out.dim(1), out_w, out.dim(0),
      workspace > 0 ? scratch.GetBytes(workspace) : nullptr, workspace, stream());
}

}  // namespace sy
