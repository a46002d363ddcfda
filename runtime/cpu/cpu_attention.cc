// Causal grouped-query attention of the CPU backend.
//
// Forward: one task per (batch, query position, chunk of keys) handles every head, so it streams
// its block of k and v rows front to back ([S, Hkv, D] is contiguous per batch entry) and reads
// each row once however many query heads share it. In a decode step (T = 1 over a long cache)
// the chunks spread one row over the pool; their partial softmax statistics (max, sum) and
// unnormalised outputs are merged afterwards, as flash-decoding does. Within a chunk the softmax
// is two-pass and stable (subtract the max, exponentiate, sum). The chunks are equal, so the
// tasks are too (fixed 256-key chunks left one thread 256 keys of a 300-key decode step and the
// other 44). When a cache is too short to chunk, the kv heads are split between tasks instead,
// each with the query heads of its kv heads, so the other threads do not wait idle.
//
// Backward: recomputes the probabilities from the saved log-sum-exp. One task per (batch, kv head)
// owns dk and dv of that kv head and dq of its query heads, so the accumulation over the query
// heads of a group needs no atomics and is deterministic.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_op_util.h"
#include "runtime/cpu/cpu_vec.h"
#include "runtime/cpu/cpu_widened.h"

namespace sy {
namespace {

// Keys per chunk at least, so each task streams enough rows to pay for its partial result.
constexpr int64_t kMinKeysPerChunk = 64;

struct AttentionDims {
  int64_t b = 0, t = 0, s = 0, hq = 0, hkv = 0, d = 0;
  int64_t group() const { return hq / hkv; }
};

AttentionDims CheckAttention(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  cpu::CheckDType(q, DType::kF32, op, "q");
  cpu::CheckDType(k, DType::kF32, op, "k");
  cpu::CheckDType(v, DType::kF32, op, "v");
  SY_CHECK(q.rank() == 4 && k.rank() == 4)
      << op << ": expected q [B,T,Hq,D] and k, v [B,S,Hkv,D]; got q " << q.ToString() << ", k "
      << k.ToString();
  cpu::CheckSameShape(k, v, op, "k", "v");
  AttentionDims dims{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  SY_CHECK(k.dim(0) == dims.b && k.dim(3) == dims.d)
      << op << ": q " << q.ToString() << " and k " << k.ToString()
      << " differ in batch or head dim";
  SY_CHECK(dims.hkv > 0 && dims.hq % dims.hkv == 0)
      << op << ": " << dims.hq << " query heads are not a multiple of " << dims.hkv << " kv heads";
  return dims;
}

// Valid kv length per batch entry, checked against the contract T <= kv_lens[b] <= S.
std::vector<int64_t> KvLens(const AttentionDims& dims, const AttentionOptions& options,
                            const char* op) {
  std::vector<int64_t> lens(static_cast<size_t>(dims.b), dims.s);
  if (options.kv_lens.empty()) {
    SY_CHECK_LE(dims.t, dims.s) << op << ": T = " << dims.t << " queries over S = " << dims.s
                                << " keys need kv_lens";
    return lens;
  }
  SY_CHECK_EQ(static_cast<int64_t>(options.kv_lens.size()), dims.b)
      << op << ": kv_lens has " << options.kv_lens.size() << " entries for batch " << dims.b;
  for (int64_t b = 0; b < dims.b; ++b) {
    int64_t len = options.kv_lens[static_cast<size_t>(b)];
    SY_CHECK(len >= dims.t && len <= dims.s)
        << op << ": kv_lens[" << b << "] = " << len << " outside [T = " << dims.t
        << ", S = " << dims.s << "]";
    lens[static_cast<size_t>(b)] = len;
  }
  return lens;
}

}  // namespace

void CpuBackend::Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const Tensor& lse, const AttentionOptions& options) {
  if (cpu::AnySixteenBit({&q, &k, &v, &out})) {
    cpu::Widened w(*this);
    return Attention(w.In(q), w.In(k), w.In(v), w.Out(out), lse, options);
  }
  for (const Tensor* t : {&q, &k, &v, &out}) CheckOperand(*t, "Attention");
  const AttentionDims dims = CheckAttention(q, k, v, "Attention");
  cpu::CheckDType(out, DType::kF32, "Attention", "out");
  cpu::CheckSameShape(q, out, "Attention", "q", "out");
  float* plse = nullptr;
  if (lse.defined()) {
    CheckOperand(lse, "Attention");
    cpu::CheckDType(lse, DType::kF32, "Attention", "lse");
    cpu::CheckShape(lse, {dims.b, dims.hq, dims.t}, "Attention", "lse");
    plse = lse.data<float>();
  }
  const std::vector<int64_t> lens = KvLens(dims, options, "Attention");
  if (dims.b * dims.t * dims.hq == 0) return;
  const float* pq = q.data<float>();
  const float* pk = k.data<float>();
  const float* pv = v.data<float>();
  float* po = out.data<float>();
  const int64_t group = dims.group(), d = dims.d, hq = dims.hq, hkv = dims.hkv;
  const float scale = options.scale;

  // A task is a (row, chunk of keys, kv heads) triple and reads its rows of k and v front to back.
  // When the rows alone do not divide evenly over the threads (a decode step of one row), the
  // keys are cut into equal chunks, 2 per thread, as flash-decoding does, each with every head,
  // so each task streams whole contiguous rows of k and v and the threads get equal shares. Two
  // per thread rather than one keep a chunk's scores in L1. Only a cache too short for chunks of
  // kMinKeysPerChunk keys has its kv heads split between tasks instead. One decode row over 8
  // query heads and 2 kv heads, 2 threads (runtime_ops_bench BM_AttentionDecode/1/8/2): 150 keys
  // 65 -> 46 us, 300 keys 96 -> 60 us, against fixed 256-key chunks and a kv-head split below
  // them, which at 300 keys left one thread 256 keys and the other 44.
  int64_t max_len = 0;
  for (int64_t len : lens) max_len = std::max(max_len, len);
  const int64_t rows = dims.b * dims.t;
  const int64_t threads = pool().num_threads();
  const int64_t want_chunks = rows % threads != 0 && rows < 4 * threads ? 2 * threads : 1;
  int64_t chunks = std::min(want_chunks, max_len / kMinKeysPerChunk);
  if (chunks > threads) chunks -= chunks % threads;  // whole rounds over the threads
  chunks = std::max<int64_t>(1, chunks);
  const int64_t chunk = std::max<int64_t>(1, (max_len + chunks - 1) / chunks);
  const int64_t head_tasks = rows * chunks < threads ? std::min(hkv, threads) : 1;
  // Per (row, chunk, head): the chunk's max score, sum of exp(score - max), and unnormalised
  // output, merged below (the flash-decoding combine).
  const int64_t stride = d + 2;
  std::vector<float> partial(static_cast<size_t>(rows * chunks * hq * stride));
  pool().ParallelFor(rows * chunks * head_tasks, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> scores;
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t item = task / head_tasks, split = task % head_tasks;
      const int64_t hk0 = hkv * split / head_tasks, hk1 = hkv * (split + 1) / head_tasks;
      const int64_t h0 = hk0 * group, h1 = hk1 * group;  // this task's query heads
      const int64_t c = item % chunks, row = item / chunks;
      const int64_t t = row % dims.t, b = row / dims.t;
      const int64_t len = lens[static_cast<size_t>(b)] - dims.t + t + 1;  // keys 0..position
      const int64_t j0 = std::min(len, c * chunk), j1 = std::min(len, j0 + chunk);
      const int64_t n = j1 - j0;
      float* part = partial.data() + item * hq * stride;
      const float* qrow = pq + row * hq * d;
      scores.resize(static_cast<size_t>(hq * std::max<int64_t>(n, 1)));
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) {
        const float* kblock = pk + ((b * dims.s + j0 + j) * hkv) * d;
        for (int64_t hk = hk0; hk < hk1; ++hk) {
          const float* const krows[4] = {kblock + hk * d, kblock + (hkv + hk) * d,
                                         kblock + (2 * hkv + hk) * d, kblock + (3 * hkv + hk) * d};
          for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
            float dots[4];
            cpu::Dot4(qrow + h * d, krows, d, dots);
            for (int r = 0; r < 4; ++r)
              scores[static_cast<size_t>(h * n + j + r)] = scale * dots[r];
          }
        }
      }
      for (; j < n; ++j) {
        const float* krow = pk + ((b * dims.s + j0 + j) * hkv) * d;
        for (int64_t h = h0; h < h1; ++h) {
          scores[static_cast<size_t>(h * n + j)] =
              scale * cpu::Dot(qrow + h * d, krow + (h / group) * d, d);
        }
      }
      for (int64_t h = h0; h < h1; ++h) {
        float* ph = part + h * stride;
        std::fill(ph, ph + d, 0.0f);
        if (n == 0) {
          ph[d] = -std::numeric_limits<float>::infinity();
          ph[d + 1] = 0.0f;
          continue;
        }
        float* s = scores.data() + h * n;
        ph[d] = cpu::MaxRow(s, n);
        ph[d + 1] = cpu::ExpShiftRow(s, ph[d], s, n);
      }
      for (int64_t j = 0; j < n; ++j) {
        const float* vrow = pv + ((b * dims.s + j0 + j) * hkv) * d;
        for (int64_t h = h0; h < h1; ++h) {
          cpu::AxpyRow(scores[static_cast<size_t>(h * n + j)], vrow + (h / group) * d,
                       part + h * stride, d);
        }
      }
    }
  });
  pool().ParallelFor(
      rows * hq, std::max<int64_t>(1, 4096 / (chunks * d)), [&](int64_t lo, int64_t hi) {
        for (int64_t rh = lo; rh < hi; ++rh) {
          const int64_t h = rh % hq, row = rh / hq;
          const int64_t t = row % dims.t, b = row / dims.t;
          float max = -std::numeric_limits<float>::infinity();
          for (int64_t c = 0; c < chunks; ++c) {
            max = std::max(
                max, partial[static_cast<size_t>(((row * chunks + c) * hq + h) * stride + d)]);
          }
          float* orow = po + rh * d;
          std::fill(orow, orow + d, 0.0f);
          float sum = 0.0f;
          for (int64_t c = 0; c < chunks; ++c) {
            const float* ph = partial.data() + ((row * chunks + c) * hq + h) * stride;
            if (ph[d + 1] == 0.0f) continue;
            const float w = std::exp(ph[d] - max);
            sum += w * ph[d + 1];
            cpu::AxpyRow(w, ph, orow, d);
          }
          const float inv = 1.0f / sum;
          for (int64_t e = 0; e < d; ++e) orow[e] *= inv;
          if (plse != nullptr) plse[(b * hq + h) * dims.t + t] = max + std::log(sum);
        }
      });
}

void CpuBackend::AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse, const Tensor& dout,
                                   const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                   const AttentionOptions& options) {
  if (cpu::AnySixteenBit({&q, &k, &v, &out, &dout, &dq, &dk, &dv})) {
    cpu::Widened w(*this);
    return AttentionBackward(w.In(q), w.In(k), w.In(v), w.In(out), lse, w.In(dout), w.Out(dq),
                             w.Out(dk), w.Out(dv), options);
  }
  for (const Tensor* t : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv}) {
    CheckOperand(*t, "AttentionBackward");
  }
  const AttentionDims dims = CheckAttention(q, k, v, "AttentionBackward");
  for (const Tensor* t : {&out, &lse, &dout, &dq, &dk, &dv}) {
    cpu::CheckDType(*t, DType::kF32, "AttentionBackward", "operand");
  }
  cpu::CheckSameShape(q, out, "AttentionBackward", "q", "out");
  cpu::CheckSameShape(q, dout, "AttentionBackward", "q", "dout");
  cpu::CheckSameShape(q, dq, "AttentionBackward", "q", "dq");
  cpu::CheckSameShape(k, dk, "AttentionBackward", "k", "dk");
  cpu::CheckSameShape(v, dv, "AttentionBackward", "v", "dv");
  cpu::CheckShape(lse, {dims.b, dims.hq, dims.t}, "AttentionBackward", "lse");
  const std::vector<int64_t> lens = KvLens(dims, options, "AttentionBackward");
  const float* pq = q.data<float>();
  const float* pk = k.data<float>();
  const float* pv = v.data<float>();
  const float* po = out.data<float>();
  const float* plse = lse.data<float>();
  const float* pdo = dout.data<float>();
  float* pdq = dq.data<float>();
  float* pdk = dk.data<float>();
  float* pdv = dv.data<float>();
  const int64_t group = dims.group(), d = dims.d;
  const float scale = options.scale;
  pool().ParallelFor(dims.b * dims.hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> p(static_cast<size_t>(dims.s)), ds(static_cast<size_t>(dims.s));
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t hk = item % dims.hkv;
      const int64_t b = item / dims.hkv;
      for (int64_t j = 0; j < dims.s; ++j) {
        std::memset(pdk + ((b * dims.s + j) * dims.hkv + hk) * d, 0, sizeof(float) * d);
        std::memset(pdv + ((b * dims.s + j) * dims.hkv + hk) * d, 0, sizeof(float) * d);
      }
      for (int64_t t = 0; t < dims.t; ++t) {
        const int64_t len = lens[static_cast<size_t>(b)] - dims.t + t + 1;
        for (int64_t r = 0; r < group; ++r) {
          const int64_t h = hk * group + r;
          const int64_t row = (b * dims.t + t) * dims.hq + h;
          const float* qrow = pq + row * d;
          const float* orow = po + row * d;
          const float* dorow = pdo + row * d;
          float* dqrow = pdq + row * d;
          const float row_lse = plse[(b * dims.hq + h) * dims.t + t];
          // P_j = exp(s_j - lse); dS_j = P_j (dout . v_j - dout . out).
          for (int64_t j = 0; j < len; ++j) {
            p[static_cast<size_t>(j)] =
                scale * cpu::Dot(qrow, pk + ((b * dims.s + j) * dims.hkv + hk) * d, d);
          }
          cpu::ExpShiftRow(p.data(), row_lse, p.data(), len);
          const float delta = cpu::Dot(dorow, orow, d);
          for (int64_t j = 0; j < len; ++j) {
            const float dp = cpu::Dot(dorow, pv + ((b * dims.s + j) * dims.hkv + hk) * d, d);
            ds[static_cast<size_t>(j)] = p[static_cast<size_t>(j)] * (dp - delta);
          }
          std::memset(dqrow, 0, sizeof(float) * d);
          for (int64_t j = 0; j < len; ++j) {
            const int64_t kv = ((b * dims.s + j) * dims.hkv + hk) * d;
            const float dsj = scale * ds[static_cast<size_t>(j)];
            cpu::AxpyRow(dsj, pk + kv, dqrow, d);
            cpu::AxpyRow(dsj, qrow, pdk + kv, d);
            cpu::AxpyRow(p[static_cast<size_t>(j)], dorow, pdv + kv, d);
          }
        }
      }
    }
  });
}

}  // namespace sy
