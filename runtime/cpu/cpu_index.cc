// Embedding lookup and MoE token permutation of the CPU backend.
//
// Gathers split over output rows. Scatter-adds split over column ranges: each task walks every
// index but owns its columns of the output, so repeated indices accumulate without atomics and in
// a fixed order (deterministic).
#include <cstring>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_op_util.h"
#include "runtime/cpu/cpu_vec.h"
#include "runtime/cpu/cpu_widened.h"

namespace sy {
namespace {

int64_t RowGrain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)); }

// Columns per task for a scatter over `rows` rows: at least one cache line, ~16K updates a task.
int64_t ColumnGrain(int64_t rows) {
  return std::max<int64_t>(16, 16384 / std::max<int64_t>(1, rows));
}

void CheckIndices(const int32_t* ids, int64_t n, int64_t limit, const char* op) {
  for (int64_t i = 0; i < n; ++i) {
    SY_CHECK(ids[i] >= 0 && ids[i] < limit)
        << op << ": index " << ids[i] << " at position " << i << " outside [0, " << limit << ")";
  }
}

}  // namespace

void CpuBackend::EmbeddingGather(const Tensor& table, const Tensor& ids, const Tensor& out) {
  if (cpu::AnySixteenBit({&out})) {
    cpu::Widened w(*this);
    return EmbeddingGather(table, ids, w.Out(out));
  }
  CheckOperand(table, "EmbeddingGather");
  CheckOperand(ids, "EmbeddingGather");
  CheckOperand(out, "EmbeddingGather");
  cpu::CheckWeightDType(table, "EmbeddingGather", "table");
  cpu::CheckDType(ids, DType::kI32, "EmbeddingGather", "ids");
  cpu::CheckDType(out, DType::kF32, "EmbeddingGather", "out");
  SY_CHECK_EQ(table.rank(), 2) << "EmbeddingGather: table " << table.ToString()
                               << " must be [V, H]";
  const int64_t vocab = table.dim(0), h = table.dim(1), n = ids.numel();
  cpu::CheckNumel(out, n * h, "EmbeddingGather", "out");
  SY_CHECK_EQ(cpu::Cols(out, "EmbeddingGather"), h)
      << "EmbeddingGather: out " << out.ToString() << " should be [" << n << ", " << h << "]";
  const int32_t* pid = ids.data<int32_t>();
  CheckIndices(pid, n, vocab, "EmbeddingGather");
  float* po = out.data<float>();
  cpu::DispatchWeight(table.dtype(), table.data(), [&](auto* w) {
    pool().ParallelFor(n, RowGrain(h), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) cpu::WidenRow(w + pid[i] * h, po + i * h, h);
    });
  });
}

void CpuBackend::EmbeddingScatterAdd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) {
  if (cpu::AnySixteenBit({&dout, &dtable})) {
    cpu::Widened w(*this);
    return EmbeddingScatterAdd(w.In(dout), ids, w.Out(dtable, /*accumulate=*/true));
  }
  CheckOperand(dout, "EmbeddingScatterAdd");
  CheckOperand(ids, "EmbeddingScatterAdd");
  CheckOperand(dtable, "EmbeddingScatterAdd");
  cpu::CheckDType(dout, DType::kF32, "EmbeddingScatterAdd", "dout");
  cpu::CheckDType(ids, DType::kI32, "EmbeddingScatterAdd", "ids");
  cpu::CheckDType(dtable, DType::kF32, "EmbeddingScatterAdd", "dtable");
  SY_CHECK_EQ(dtable.rank(), 2) << "EmbeddingScatterAdd: dtable " << dtable.ToString()
                                << " must be [V, H]";
  const int64_t vocab = dtable.dim(0), h = dtable.dim(1), n = ids.numel();
  cpu::CheckNumel(dout, n * h, "EmbeddingScatterAdd", "dout");
  SY_CHECK_EQ(cpu::Cols(dout, "EmbeddingScatterAdd"), h)
      << "EmbeddingScatterAdd: dout " << dout.ToString() << " should be [" << n << ", " << h << "]";
  const int32_t* pid = ids.data<int32_t>();
  CheckIndices(pid, n, vocab, "EmbeddingScatterAdd");
  const float* pd = dout.data<float>();
  float* pt = dtable.data<float>();
  pool().ParallelFor(h, ColumnGrain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; ++i) {
      const float* src = pd + i * h + lo;
      float* dst = pt + pid[i] * h + lo;
      for (int64_t j = 0; j < hi - lo; ++j) dst[j] += src[j];
    }
  });
}

void CpuBackend::GatherRows(const Tensor& src, const Tensor& indices, const Tensor& out) {
  CheckOperand(src, "GatherRows");
  CheckOperand(indices, "GatherRows");
  CheckOperand(out, "GatherRows");
  cpu::CheckDType(indices, DType::kI32, "GatherRows", "indices");
  SY_CHECK(src.dtype() == out.dtype()) << "GatherRows: src " << src.ToString() << " and out "
                                       << out.ToString() << " differ in dtype";
  SY_CHECK_EQ(src.rank(), 2) << "GatherRows: src " << src.ToString() << " must be [N, H]";
  const int64_t rows = src.dim(0), h = src.dim(1), m = indices.numel();
  cpu::CheckShape(out, {m, h}, "GatherRows", "out");
  const int32_t* pid = indices.data<int32_t>();
  CheckIndices(pid, m, rows, "GatherRows");
  const size_t row_bytes = static_cast<size_t>(h) * DTypeSize(src.dtype());
  const auto* ps = static_cast<const char*>(src.data());
  auto* po = static_cast<char*>(out.data());
  pool().ParallelFor(m, RowGrain(h), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      std::memcpy(po + static_cast<size_t>(i) * row_bytes,
                  ps + static_cast<size_t>(pid[i]) * row_bytes, row_bytes);
    }
  });
}

void CpuBackend::ScatterAddRows(const Tensor& src, const Tensor& indices, const Tensor& weights,
                                const Tensor& out) {
  if (cpu::AnySixteenBit({&src, &weights, &out})) {
    cpu::Widened w(*this);
    return ScatterAddRows(w.In(src), indices, w.In(weights), w.Out(out, /*accumulate=*/true));
  }
  CheckOperand(src, "ScatterAddRows");
  CheckOperand(indices, "ScatterAddRows");
  CheckOperand(out, "ScatterAddRows");
  cpu::CheckDType(src, DType::kF32, "ScatterAddRows", "src");
  cpu::CheckDType(indices, DType::kI32, "ScatterAddRows", "indices");
  cpu::CheckDType(out, DType::kF32, "ScatterAddRows", "out");
  SY_CHECK(src.rank() == 2 && out.rank() == 2)
      << "ScatterAddRows: expected src [M, H] and out [N, H]; got src " << src.ToString()
      << ", out " << out.ToString();
  const int64_t m = src.dim(0), h = src.dim(1), rows = out.dim(0);
  SY_CHECK_EQ(out.dim(1), h) << "ScatterAddRows: src " << src.ToString() << " and out "
                             << out.ToString() << " differ in width";
  cpu::CheckNumel(indices, m, "ScatterAddRows", "indices");
  const float* pw = nullptr;
  if (weights.defined()) {
    CheckOperand(weights, "ScatterAddRows");
    cpu::CheckDType(weights, DType::kF32, "ScatterAddRows", "weights");
    cpu::CheckNumel(weights, m, "ScatterAddRows", "weights");
    pw = weights.data<float>();
  }
  const int32_t* pid = indices.data<int32_t>();
  CheckIndices(pid, m, rows, "ScatterAddRows");
  const float* ps = src.data<float>();
  float* po = out.data<float>();
  pool().ParallelFor(h, ColumnGrain(m), [&](int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < m; ++i) {
      const float w = pw != nullptr ? pw[i] : 1.0f;
      const float* s = ps + i * h + lo;
      float* dst = po + pid[i] * h + lo;
      for (int64_t j = 0; j < hi - lo; ++j) dst[j] += w * s[j];
    }
  });
}

}  // namespace sy
