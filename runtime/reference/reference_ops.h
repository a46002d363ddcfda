// Reference operators: plain, obviously-correct double-precision versions of every forward and
// backward operator of runtime/backend/backend.h, on host data. They are the oracle the op-check
// harness (runtime/opcheck) compares every backend against, as llm.c keeps its naive kernels
// beside the optimised ones. They share no code with runtime/cpu and are deliberately
// unoptimised: straight loops in the order the math is written.
//
// Conventions. Tensors are flat row-major std::vector<double> / std::span<const double> with the
// dimensions passed explicitly; index tensors are std::vector<int32_t>. Semantics (shapes,
// accumulation, ignore index -1, causal positions, GQA head mapping, tie order) are those
// documented in backend.h. Where backend.h says an operator accumulates, the reference takes the
// initial output and returns the updated copy. A beta of 0 follows the BLAS rule: the prior
// contents of c are not read (so they may be NaN).
//
// Bad arguments (sizes that disagree with the dimensions, out-of-range indices) abort through
// SY_CHECK.
//
// Ownership: every function returns fresh vectors owned by the caller.
// Thread-safety: pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend/backend.h"

namespace sy::reference {

using Values = std::vector<double>;
using ConstValues = std::span<const double>;

// ---- number formats: the value a double rounds to in each storage format ----
// Round to nearest, ties to even, with subnormals and overflow to infinity as IEEE 754. Written
// from the format definitions (significand bits, minimum exponent, largest finite value),
// independently of the bit manipulations in runtime/core/dtype.h.
double RoundToF32(double x);
double RoundToBF16(double x);
double RoundToF16(double x);
// The value x takes when stored as `dtype` (f32, bf16 or f16).
double RoundTo(DType dtype, double x);

// ---- GEMM ----
// c [m,n] = alpha * op(a) * op(b) + beta * c; a [m,k] ([k,m] if trans_a), b [k,n] ([n,k] if
// trans_b).
Values Gemm(int64_t m, int64_t n, int64_t k, ConstValues a, ConstValues b, ConstValues c,
            const GemmOptions& options);
// The same for each of `batch` consecutive problems.
Values BatchedGemm(int64_t batch, int64_t m, int64_t n, int64_t k, ConstValues a, ConstValues b,
                   ConstValues c, const GemmOptions& options);
// a [R,k] split into groups of group_rows[g] rows; b [G,k,n] ([G,n,k] if trans_b); c [R,n].
Values GroupedGemm(std::span<const int64_t> group_rows, int64_t n, int64_t k, ConstValues a,
                   ConstValues b, ConstValues c, const GemmOptions& options);
// dw [G,n,k] = beta * dw + dy_g^T x_g with x [R,k], dy [R,n].
Values GroupedGemmWeightGrad(std::span<const int64_t> group_rows, int64_t n, int64_t k,
                             ConstValues x, ConstValues dy, ConstValues dw, double beta);

// ---- elementwise ----
Values Add(ConstValues a, ConstValues b);
Values Mul(ConstValues a, ConstValues b);
Values Scale(ConstValues x, double alpha);
Values Axpy(double alpha, ConstValues x, ConstValues y);  // returns y + alpha * x
Values AddBias(int64_t rows, int64_t n, ConstValues x, ConstValues bias);
Values Silu(ConstValues x);
Values SiluBackward(ConstValues x, ConstValues dout);
Values Gelu(ConstValues x);  // exact erf form
Values GeluBackward(ConstValues x, ConstValues dout);
Values Relu(ConstValues x);
Values ReluBackward(ConstValues x, ConstValues dout);
Values Swiglu(ConstValues gate, ConstValues up);
struct SwigluGrads {
  Values dgate, dup;
};
SwigluGrads SwigluBackward(ConstValues gate, ConstValues up, ConstValues dout);

// ---- reductions, softmax, top-k, cross-entropy ----
// x viewed as [rows, n]; out [rows] (kLast) or [n] (kFirst).
Values Reduce(int64_t rows, int64_t n, ConstValues x, ReduceOp op, ReduceAxis axis);
Values Softmax(int64_t rows, int64_t n, ConstValues x);
Values SoftmaxBackward(int64_t rows, int64_t n, ConstValues y, ConstValues dy);
struct TopKResult {
  Values values;                 // [rows, k]
  std::vector<int32_t> indices;  // [rows, k]
};
TopKResult TopK(int64_t rows, int64_t n, ConstValues x, int k);
struct CrossEntropyResult {
  Values losses;  // [rows]
  Values lse;     // [rows]
};
CrossEntropyResult CrossEntropy(int64_t rows, int64_t v, ConstValues logits,
                                std::span<const int32_t> targets);
Values CrossEntropyBackward(int64_t rows, int64_t v, ConstValues logits,
                            std::span<const int32_t> targets, ConstValues lse, ConstValues dlosses);

// ---- normalisation and rotary embedding ----
struct RmsNormResult {
  Values out;   // [rows, n]
  Values rstd;  // [rows]
};
RmsNormResult RmsNorm(int64_t rows, int64_t n, ConstValues x, ConstValues weight, double eps);
struct RmsNormGrads {
  Values dx;       // [rows, n]
  Values dweight;  // [n]
};
RmsNormGrads RmsNormBackward(int64_t rows, int64_t n, ConstValues x, ConstValues weight,
                             ConstValues rstd, ConstValues dout);
// x [t, heads, d], positions [t]. rotary_dim: the first rotary_dim values of each head rotate (as
// a head of rotary_dim would), the rest pass through; 0 = all d.
Values Rope(int64_t t, int64_t heads, int64_t d, ConstValues x, std::span<const int32_t> positions,
            double theta, int64_t rotary_dim = 0);
Values RopeBackward(int64_t t, int64_t heads, int64_t d, ConstValues dout,
                    std::span<const int32_t> positions, double theta, int64_t rotary_dim = 0);

// ---- attention ----
struct AttentionShape {
  int64_t batch = 0;     // B
  int64_t q_len = 0;     // T
  int64_t kv_len = 0;    // S (cache capacity)
  int64_t q_heads = 0;   // Hq
  int64_t kv_heads = 0;  // Hkv
  int64_t head_dim = 0;  // D
};
struct AttentionResult {
  Values out;  // [B,T,Hq,D]
  Values lse;  // [B,Hq,T]
};
// kv_lens empty means S for every batch entry.
AttentionResult Attention(const AttentionShape& shape, ConstValues q, ConstValues k, ConstValues v,
                          double scale, std::span<const int32_t> kv_lens);
struct AttentionGrads {
  Values dq, dk, dv;
};
AttentionGrads AttentionBackward(const AttentionShape& shape, ConstValues q, ConstValues k,
                                 ConstValues v, ConstValues out, ConstValues lse, ConstValues dout,
                                 double scale, std::span<const int32_t> kv_lens);

// ---- indexing ----
Values EmbeddingGather(int64_t vocab, int64_t h, ConstValues table, std::span<const int32_t> ids);
Values EmbeddingScatterAdd(int64_t vocab, int64_t h, ConstValues dout, std::span<const int32_t> ids,
                           ConstValues dtable);
Values GatherRows(int64_t rows, int64_t h, ConstValues src, std::span<const int32_t> indices);
// weights empty means all 1.
Values ScatterAddRows(int64_t rows, int64_t h, ConstValues src, std::span<const int32_t> indices,
                      ConstValues weights, ConstValues out);

}  // namespace sy::reference
