// The CUDA backend's GEMMs, through cuBLAS.
//
// Note [row-major GEMM on column-major cuBLAS]
// A row-major [r, c] matrix is, byte for byte, the column-major [c, r] matrix of its transpose.
// So the row-major product C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T:
// cuBLAS's first operand is B (ld = its row-major row length), the second is A, and m/n swap.
//
// Note [mixed-precision GEMM]
// Activations are f32; weights may be bf16 or f16, and the contract (and the CPU backend, and the
// op-check harness at an nmse of 1e-10) wants the f32 product of the f32 activation with the
// weight's exact value. cuBLAS has no f32 x bf16 product, and rounding the activation to the
// weight's dtype would cost ~1e-3 relative error. So:
//   bf16 weights: the activation is converted to bf16 three times over: a = hi + mid + lo, each
//     term bf16 (8 significant bits), the remainders exact in f32, so the three terms carry all 24
//     bits of a. cublasGemmEx multiplies each term by the weight with CUBLAS_COMPUTE_32F and an f32
//     output (bf16 x bf16 products are exact in f32; tensor cores accumulate in f32) and the three
//     results are summed smallest first. When the three [m, n] results fit a small scratch (decode,
//     small batches) the terms are stacked into one GEMM of 3m rows, so the weight, the large
//     operand, is read once; otherwise three accumulating GEMMs (beta = 1 after the first) avoid a
//     large scratch, and at that size the GEMM is compute-bound anyway.
//   f16 weights: f16's narrow exponent range rules the same split out (large activations overflow,
//     small remainders fall into subnormals), so the weight is widened (exactly) to f32 into
//     scratch and multiplied in f32.
//   f32 x f32: CUBLAS_COMPUTE_32F with the default math mode: true FP32, no TF32.
// Scratch comes from the caching allocator and is retired behind the GEMM (CudaBackend::Scratch).
//
// Note [16-bit GEMM operands]
// a, b and c may each be f32, bf16 or f16 (Note [16-bit operands] in runtime/backend/backend.h);
// every GEMM multiplies the operands' exact values and accumulates in f32. The dispatch:
//   a and b 16-bit of one dtype: cublasGemmEx (strided batched for BatchedGemm, one call per
//     group for the grouped GEMMs) with that dtype for A and B and CUBLAS_COMPUTE_32F: tensor
//     cores, f32 accumulation. c is written directly when it is f32 or a's dtype (cuBLAS rounds
//     alpha * acc + beta * c once); c of the other 16-bit dtype goes through f32 scratch.
//   otherwise (a f32, or a 16-bit with b f32 or of the other 16-bit dtype): a 16-bit a is widened
//     (exactly) to f32 in scratch, and the product is Note [mixed-precision GEMM]'s (f32 x f32,
//     f32 x split bf16, f32 x widened f16) into an f32 c; a 16-bit c is staged in f32 scratch
//     (read only when beta != 0) and rounded once at the end.
// GroupedGemmWeightGrad (dw f32): x and dy of one dtype multiply directly (f32, or 16-bit on
// tensor cores); of different dtypes, the 16-bit one is widened to f32 first.
#include <algorithm>
#include <climits>
#include <string>

#include "runtime/core/check.h"
#include "runtime/cuda/cuda_backend_impl.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.cuh"

namespace sy {
namespace {

// Largest scratch for the stacked bf16 GEMM's three partial products.
constexpr int64_t kStackedSplitMaxBytes = int64_t{64} << 20;
constexpr size_t kBf16Bytes = 2;

cudaDataType_t CudaDataType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
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
  SY_CHECK(false) << "GEMM operand dtype " << DTypeName(dtype) << " (expected f32, bf16 or f16)";
  return CUDA_R_32F;
}

void CheckFloatDType(DType dtype, const char* what) {
  SY_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16)
      << what << ": dtype " << DTypeName(dtype) << " (expected f32, bf16 or f16)";
}

// The kernels' name for a dtype CheckFloatDType accepted.
cuda::FloatType KernelType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return cuda::FloatType::kBF16;
    case DType::kF16:
      return cuda::FloatType::kF16;
    default:
      return cuda::FloatType::kF32;
  }
}

bool Is16Bit(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

// Whether a and b are 16-bit operands of one dtype, which cuBLAS multiplies directly.
bool Direct16(DType a, DType b) { return Is16Bit(a) && a == b; }

// Whether cuBLAS writes c itself: c f32, or of the 16-bit dtype of a direct product.
bool DirectC(DType a, DType b, DType c) { return c == DType::kF32 || (Direct16(a, b) && c == a); }

// `data` plus `elements` elements of `dtype`.
const void* Offset(const void* data, int64_t elements, DType dtype) {
  return static_cast<const char*>(data) + static_cast<size_t>(elements) * DTypeSize(dtype);
}
void* Offset(void* data, int64_t elements, DType dtype) {
  return static_cast<char*>(data) + static_cast<size_t>(elements) * DTypeSize(dtype);
}

int CheckedInt(int64_t value, const char* what) {
  SY_CHECK(value >= 0 && value <= INT_MAX)
      << what << " = " << value << " does not fit cuBLAS's int";
  return static_cast<int>(value);
}

// The rows and columns of op(t) for a rank-2 view t.
struct OpDims {
  int64_t rows;
  int64_t cols;
};
OpDims Op(int64_t dim0, int64_t dim1, bool trans) {
  return trans ? OpDims{dim1, dim0} : OpDims{dim0, dim1};
}

std::string GemmShapes(const Tensor& a, const Tensor& b, const Tensor& c, bool trans_a,
                       bool trans_b) {
  return "a " + a.ToString() + (trans_a ? "^T" : "") + ", b " + b.ToString() +
         (trans_b ? "^T" : "") + ", c " + c.ToString();
}

bool StackedSplitFits(int64_t batch, int64_t m, int64_t n) {
  return 3 * batch * m * n * static_cast<int64_t>(sizeof(float)) <= kStackedSplitMaxBytes;
}

void CheckGroupRows(std::span<const int64_t> group_rows, int64_t groups, int64_t rows,
                    const char* what) {
  SY_CHECK_EQ(static_cast<int64_t>(group_rows.size()), groups)
      << what << ": one row count per group";
  int64_t total = 0;
  for (int64_t r : group_rows) {
    SY_CHECK_GE(r, 0) << what << ": negative group row count";
    total += r;
  }
  SY_CHECK_EQ(total, rows) << what << ": group_rows must sum to the rows of the activations";
}

}  // namespace

void CudaBackend::RunGemm(const GemmCall& call) {
  if (call.m == 0 || call.n == 0 || call.batch == 0) return;
  if (call.k == 0) {  // an empty sum: c = beta * c (cuBLAS's k = 0 behaviour is not relied on)
    for (int64_t i = 0; i < call.batch; ++i) {
      cuda::LaunchBetaScale(
          {Offset(call.c, i * call.stride_c, call.c_dtype), KernelType(call.c_dtype)}, call.beta,
          call.m * call.n, stream());
    }
    return;
  }
  const int m = CheckedInt(call.m, "GEMM m");
  const int n = CheckedInt(call.n, "GEMM n");
  const int k = CheckedInt(call.k, "GEMM k");
  const cudaDataType_t type = CudaDataType(call.dtype);
  // c: f32, or the 16-bit dtype of a and b (Note [16-bit GEMM operands]).
  SY_CHECK(call.c_dtype == DType::kF32 || call.c_dtype == call.dtype)
      << "GEMM: c " << DTypeName(call.c_dtype) << " with " << DTypeName(call.dtype) << " operands";
  const cudaDataType_t c_type = CudaDataType(call.c_dtype);
  // Note [row-major GEMM on column-major cuBLAS]: first operand b, second a.
  const cublasOperation_t op_b = call.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = call.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ld_b = call.trans_b ? k : n;
  const int ld_a = call.lda != 0 ? CheckedInt(call.lda, "GEMM lda") : (call.trans_a ? m : k);
  if (call.batch == 1) {
    SY_CUBLAS_CHECK(cublas_->library().gemm_ex(
        cublas_->get(), op_b, op_a, n, m, k, &call.alpha, call.b, type, ld_b, call.a, type, ld_a,
        &call.beta, call.c, c_type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    SY_CUBLAS_CHECK(cublas_->library().gemm_strided_batched_ex(
        cublas_->get(), op_b, op_a, n, m, k, &call.alpha, call.b, type, ld_b, call.stride_b, call.a,
        type, ld_a, call.stride_a, &call.beta, call.c, c_type, n, call.stride_c,
        CheckedInt(call.batch, "GEMM batch"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void CudaBackend::RunSplitGemm(const GemmCall& call, const void* pieces, float* stacked) {
  if (call.m == 0 || call.n == 0 || call.batch == 0) return;
  if (call.k == 0) {
    RunGemm(call);  // the beta-only case
    return;
  }
  SY_CHECK(call.c_dtype == DType::kF32) << "split GEMM: c must be f32";
  // pieces (LaunchSplitBf16x3 over the stored a) per batch entry:
  //   no trans_a: [m][3][k], i.e. a [3m, k] matrix with row 3i + p = term p of row i;
  //   trans_a:    [k][3][m], i.e. a stored [k, 3m] matrix whose op() row p*m + i = term p of i.
  const int64_t piece_count = call.m * call.k;
  GemmCall base = call;
  base.a = pieces;
  base.dtype = DType::kBF16;
  base.stride_a = 3 * piece_count;
  if (stacked != nullptr) {
    GemmCall all = base;
    all.m = 3 * call.m;
    all.c = stacked;
    all.alpha = 1.0f;
    all.beta = 0.0f;
    all.stride_c = 3 * call.m * call.n;
    RunGemm(all);
    const int64_t row_stride = call.trans_a ? 1 : 3;
    const int64_t piece_stride = call.trans_a ? call.m : 1;
    // c is contiguous over the batch in every caller (stride_c == m * n).
    SY_CHECK(call.batch == 1 || call.stride_c == call.m * call.n) << "split GEMM: strided c";
    cuda::LaunchCombineSplit(stacked, call.batch, call.m, call.n, row_stride, piece_stride,
                             call.alpha, call.beta, static_cast<float*>(call.c), stream());
    return;
  }
  // Three accumulating GEMMs, smallest term first; term p starts p rows (p * m elements with
  // trans_a) in, and its rows are 3 rows apart.
  const char* bytes = static_cast<const char*>(pieces);
  for (int p = 2; p >= 0; --p) {
    GemmCall term = base;
    const int64_t offset = call.trans_a ? p * call.m : p * call.k;
    term.a = bytes + static_cast<size_t>(offset) * kBf16Bytes;
    term.lda = call.trans_a ? 3 * call.m : 3 * call.k;
    term.beta = p == 2 ? call.beta : 1.0f;
    RunGemm(term);
  }
}

void CudaBackend::RunAnyGemm(GemmCall call, const Tensor& a, const Tensor& b, const Tensor& c,
                             Scratch& scratch) {
  // Note [16-bit GEMM operands].
  const bool direct = Direct16(a.dtype(), b.dtype());
  const bool empty = call.batch == 0 || call.m == 0 || call.n == 0 || call.k == 0;
  float* staged = nullptr;  // c in f32, where cuBLAS cannot write c itself
  if (DirectC(a.dtype(), b.dtype(), c.dtype())) {
    call.c_dtype = c.dtype();
  } else if (c.numel() > 0) {
    staged = scratch.Get<float>(c.numel());
    if (call.beta != 0.0f) {  // beta == 0: c is not read (it may hold NaN)
      cuda::LaunchConvert(c.data(), KernelType(c.dtype()), staged, cuda::FloatType::kF32, c.numel(),
                          stream());
    }
    call.c = staged;
    call.c_dtype = DType::kF32;
  }
  if (direct) {  // two 16-bit operands of one dtype: tensor cores
    call.dtype = a.dtype();
    RunGemm(call);
  } else {
    // a in f32 (a 16-bit a widened exactly), then Note [mixed-precision GEMM] by b's dtype.
    const float* a32 = static_cast<const float*>(a.data());
    if (Is16Bit(a.dtype()) && !empty) {
      float* widened = scratch.Get<float>(a.numel());
      cuda::LaunchConvert(a.data(), KernelType(a.dtype()), widened, cuda::FloatType::kF32,
                          a.numel(), stream());
      a32 = widened;
    }
    call.a = a32;
    call.dtype = DType::kF32;
    if (b.dtype() == DType::kBF16 && !empty) {  // Note [mixed-precision GEMM]
      void* pieces = scratch.GetBytes(3 * static_cast<size_t>(a.numel()) * kBf16Bytes);
      // Split the stored matrix (each batch entry's rows, one after another).
      const int64_t inner = a.dim(a.rank() - 1);
      cuda::LaunchSplitBf16x3(a32, a.numel() / inner, inner, pieces, stream());
      float* stacked = StackedSplitFits(call.batch, call.m, call.n)
                           ? scratch.Get<float>(3 * call.batch * call.m * call.n)
                           : nullptr;
      RunSplitGemm(call, pieces, stacked);
    } else {
      if (b.dtype() == DType::kF16 && !empty) {
        float* widened = scratch.Get<float>(b.numel());
        cuda::LaunchConvert(b.data(), cuda::FloatType::kF16, widened, cuda::FloatType::kF32,
                            b.numel(), stream());
        call.b = widened;
      }
      RunGemm(call);
    }
  }
  if (staged != nullptr) {  // the one rounding of a 16-bit c
    cuda::LaunchConvert(staged, cuda::FloatType::kF32, c.data(), KernelType(c.dtype()), c.numel(),
                        stream());
  }
}

void CudaBackend::Gemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) {
  CheckOperand(a, "Gemm a");
  CheckOperand(b, "Gemm b");
  CheckOperand(c, "Gemm c");
  SY_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2)
      << "Gemm wants rank-2 operands: " << GemmShapes(a, b, c, options.trans_a, options.trans_b);
  CheckFloatDType(a.dtype(), "Gemm a");
  CheckFloatDType(b.dtype(), "Gemm b");
  CheckFloatDType(c.dtype(), "Gemm c");
  const OpDims da = Op(a.dim(0), a.dim(1), options.trans_a);
  const OpDims db = Op(b.dim(0), b.dim(1), options.trans_b);
  SY_CHECK(da.cols == db.rows && c.dim(0) == da.rows && c.dim(1) == db.cols)
      << "Gemm shape mismatch: " << GemmShapes(a, b, c, options.trans_a, options.trans_b);
  GemmCall call;
  call.a = a.data();
  call.b = b.data();
  call.c = c.data();
  call.m = da.rows;
  call.n = db.cols;
  call.k = da.cols;
  call.trans_a = options.trans_a;
  call.trans_b = options.trans_b;
  call.alpha = options.alpha;
  call.beta = options.beta;
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  RunAnyGemm(call, a, b, c, scratch);
}

void CudaBackend::BatchedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                              GemmOptions options) {
  CheckOperand(a, "BatchedGemm a");
  CheckOperand(b, "BatchedGemm b");
  CheckOperand(c, "BatchedGemm c");
  SY_CHECK(a.rank() == 3 && b.rank() == 3 && c.rank() == 3)
      << "BatchedGemm wants rank-3 operands: "
      << GemmShapes(a, b, c, options.trans_a, options.trans_b);
  CheckFloatDType(a.dtype(), "BatchedGemm a");
  CheckFloatDType(b.dtype(), "BatchedGemm b");
  CheckFloatDType(c.dtype(), "BatchedGemm c");
  const int64_t batch = a.dim(0);
  const OpDims da = Op(a.dim(1), a.dim(2), options.trans_a);
  const OpDims db = Op(b.dim(1), b.dim(2), options.trans_b);
  SY_CHECK(b.dim(0) == batch && c.dim(0) == batch && da.cols == db.rows && c.dim(1) == da.rows &&
           c.dim(2) == db.cols)
      << "BatchedGemm shape mismatch: " << GemmShapes(a, b, c, options.trans_a, options.trans_b);
  GemmCall call;
  call.a = a.data();
  call.b = b.data();
  call.c = c.data();
  call.m = da.rows;
  call.n = db.cols;
  call.k = da.cols;
  call.trans_a = options.trans_a;
  call.trans_b = options.trans_b;
  call.alpha = options.alpha;
  call.beta = options.beta;
  call.batch = batch;
  call.stride_a = a.dim(1) * a.dim(2);
  call.stride_b = b.dim(1) * b.dim(2);
  call.stride_c = c.dim(1) * c.dim(2);
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  RunAnyGemm(call, a, b, c, scratch);
}

void CudaBackend::GroupedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                              std::span<const int64_t> group_rows, GemmOptions options) {
  CheckOperand(a, "GroupedGemm a");
  CheckOperand(b, "GroupedGemm b");
  CheckOperand(c, "GroupedGemm c");
  SY_CHECK(!options.trans_a) << "GroupedGemm: trans_a must be false";
  SY_CHECK(a.rank() == 2 && b.rank() == 3 && c.rank() == 2)
      << "GroupedGemm wants a [R,K], b [G,K,N] (or [G,N,K]), c [R,N]: "
      << GemmShapes(a, b, c, false, options.trans_b);
  CheckFloatDType(a.dtype(), "GroupedGemm a");
  CheckFloatDType(b.dtype(), "GroupedGemm b");
  CheckFloatDType(c.dtype(), "GroupedGemm c");
  const int64_t groups = b.dim(0);
  const int64_t k = a.dim(1);
  const OpDims db = Op(b.dim(1), b.dim(2), options.trans_b);
  const int64_t n = db.cols;
  SY_CHECK(db.rows == k && c.dim(0) == a.dim(0) && c.dim(1) == n)
      << "GroupedGemm shape mismatch: " << GemmShapes(a, b, c, false, options.trans_b);
  CheckGroupRows(group_rows, groups, a.dim(0), "GroupedGemm");
  if (a.dim(0) == 0 || n == 0) return;  // no rows of c to touch
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  // Note [16-bit GEMM operands]: a and b 16-bit of one dtype multiply directly, group by group;
  // otherwise a is read in f32 (widened when 16-bit) against b as Note [mixed-precision GEMM]
  // says. c is written directly, or staged in f32 and rounded once at the end. Every row of c
  // belongs to a non-empty group, so the staged c is written whole.
  const bool direct = Direct16(a.dtype(), b.dtype());
  const DType ab_dtype = direct ? a.dtype() : DType::kF32;
  void* c_data = c.data();
  DType c_dtype = c.dtype();
  float* staged = nullptr;
  if (!DirectC(a.dtype(), b.dtype(), c.dtype())) {
    staged = scratch.Get<float>(c.numel());
    if (options.beta != 0.0f) {  // beta == 0: c is not read
      cuda::LaunchConvert(c.data(), KernelType(c.dtype()), staged, cuda::FloatType::kF32, c.numel(),
                          stream());
    }
    c_data = staged;
    c_dtype = DType::kF32;
  }
  const void* a_data = a.data();
  if (!direct && Is16Bit(a.dtype()) && k > 0) {
    float* widened = scratch.Get<float>(a.numel());
    cuda::LaunchConvert(a.data(), KernelType(a.dtype()), widened, cuda::FloatType::kF32, a.numel(),
                        stream());
    a_data = widened;
  }
  // Per-call workspaces, reused group after group: every group's GEMM is ordered on the compute
  // stream, so one group's use of a block finishes before the next group's begins.
  const void* pieces = nullptr;
  float* stacked = nullptr;
  float* widened = nullptr;
  if (k > 0 && !direct) {
    if (b.dtype() == DType::kBF16) {
      void* split = scratch.GetBytes(3 * static_cast<size_t>(a.numel()) * kBf16Bytes);
      cuda::LaunchSplitBf16x3(static_cast<const float*>(a_data), a.dim(0), k, split, stream());
      pieces = split;
      int64_t largest_stacked = 0;
      for (int64_t rows : group_rows) {
        if (StackedSplitFits(1, rows, n)) largest_stacked = std::max(largest_stacked, rows);
      }
      if (largest_stacked > 0) stacked = scratch.Get<float>(3 * largest_stacked * n);
    } else if (b.dtype() == DType::kF16) {
      widened = scratch.Get<float>(k * n);
    }
  }
  // One cuBLAS call (two or three for split bf16) per non-empty group; empty groups have no rows
  // of c to touch. With the handful to hundreds of experts of an MoE layer the launch overhead is
  // small next to the expert GEMMs themselves.
  int64_t row = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = group_rows[g];
    if (rows == 0) continue;
    GemmCall call;
    call.a = Offset(a_data, row * k, ab_dtype);
    call.b = Offset(b.data(), g * k * n, b.dtype());
    call.c = Offset(c_data, row * n, c_dtype);
    call.dtype = ab_dtype;
    call.c_dtype = c_dtype;
    call.m = rows;
    call.n = n;
    call.k = k;
    call.trans_b = options.trans_b;
    call.alpha = options.alpha;
    call.beta = options.beta;
    if (pieces != nullptr) {
      const void* group_pieces =
          static_cast<const char*>(pieces) + static_cast<size_t>(3 * row * k) * kBf16Bytes;
      RunSplitGemm(call, group_pieces, StackedSplitFits(1, rows, n) ? stacked : nullptr);
    } else {
      if (widened != nullptr) {
        cuda::LaunchConvert(call.b, cuda::FloatType::kF16, widened, cuda::FloatType::kF32, k * n,
                            stream());
        call.b = widened;
      }
      RunGemm(call);
    }
    row += rows;
  }
  if (staged != nullptr) {  // the one rounding of a 16-bit c
    cuda::LaunchConvert(staged, cuda::FloatType::kF32, c.data(), KernelType(c.dtype()), c.numel(),
                        stream());
  }
}

void CudaBackend::GroupedGemmWeightGrad(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                        std::span<const int64_t> group_rows, float beta) {
  CheckOperand(x, "GroupedGemmWeightGrad x");
  CheckOperand(dy, "GroupedGemmWeightGrad dy");
  CheckOperand(dw, "GroupedGemmWeightGrad dw");
  SY_CHECK(x.rank() == 2 && dy.rank() == 2 && dw.rank() == 3)
      << "GroupedGemmWeightGrad wants x [R,K], dy [R,N], dw [G,N,K]: x " << x.ToString() << ", dy "
      << dy.ToString() << ", dw " << dw.ToString();
  CheckFloatDType(x.dtype(), "GroupedGemmWeightGrad x");
  CheckFloatDType(dy.dtype(), "GroupedGemmWeightGrad dy");
  SY_CHECK(dw.dtype() == DType::kF32) << "GroupedGemmWeightGrad: dw must be f32";
  const int64_t groups = dw.dim(0);
  const int64_t n = dy.dim(1);
  const int64_t k = x.dim(1);
  SY_CHECK(x.dim(0) == dy.dim(0) && dw.dim(1) == n && dw.dim(2) == k)
      << "GroupedGemmWeightGrad shape mismatch: x " << x.ToString() << ", dy " << dy.ToString()
      << ", dw " << dw.ToString();
  CheckGroupRows(group_rows, groups, x.dim(0), "GroupedGemmWeightGrad");
  ScopedCudaDevice guard(info_.index);
  Scratch scratch(*this);
  // Note [16-bit GEMM operands]: x and dy of one dtype multiply directly (f32 x f32, or 16-bit on
  // tensor cores); of different dtypes, each 16-bit one is widened (exactly) to f32.
  const bool same = x.dtype() == dy.dtype();
  const DType dtype = same ? x.dtype() : DType::kF32;
  const void* x_data = x.data();
  const void* dy_data = dy.data();
  if (!same) {
    if (Is16Bit(x.dtype()) && x.numel() > 0) {
      float* widened = scratch.Get<float>(x.numel());
      cuda::LaunchConvert(x.data(), KernelType(x.dtype()), widened, cuda::FloatType::kF32,
                          x.numel(), stream());
      x_data = widened;
    }
    if (Is16Bit(dy.dtype()) && dy.numel() > 0) {
      float* widened = scratch.Get<float>(dy.numel());
      cuda::LaunchConvert(dy.data(), KernelType(dy.dtype()), widened, cuda::FloatType::kF32,
                          dy.numel(), stream());
      dy_data = widened;
    }
  }
  int64_t row = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = group_rows[g];
    // dw[g] [N,K] = dy_g^T [N,R_g] * x_g [R_g,K] + beta * dw[g]. An empty group is a k = 0
    // product, which RunGemm turns into dw[g] = beta * dw[g].
    GemmCall call;
    call.a = Offset(dy_data, row * n, dtype);
    call.b = Offset(x_data, row * k, dtype);
    call.c = dw.data<float>() + g * n * k;
    call.dtype = dtype;
    call.c_dtype = DType::kF32;
    call.m = n;
    call.n = k;
    call.k = rows;
    call.trans_a = true;
    call.alpha = 1.0f;
    call.beta = beta;
    RunGemm(call);
    row += rows;
  }
}

}  // namespace sy
