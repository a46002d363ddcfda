// Causal grouped-query attention, forward and backward, for the CUDA backend.
//
// Layouts (contiguous): q, out, dout, dq [B, T, Hq, D]; k, v, dk, dv [B, S, Hkv, D], each f32,
// bf16 or f16 independently; lse [B, Hq, T] f32. Scores, softmax statistics
// and accumulators are f32; each 16-bit output is rounded once (Note [16-bit operands]). Query t of
// batch b sits at position kv_lens[b] - T + t and attends keys 0..position. Query head h reads kv
// head h / (Hq / Hkv).
//
// Forward: a tiled online-softmax ("flash") kernel. A block owns one kv head of one batch entry and
// 16 query rows, where the rows run over (token, query head of the group), so decode (T = 1) still
// shares every K/V tile across the group's query heads; K/V tiles of 32 keys are staged through
// shared memory and the scores never reach global memory.
// Backward: recomputes the probabilities from lse. One kernel computes dq per query-row tile;
// another owns a tile of 16 keys of one kv head and loops over every query row of the group that
// can see them, so dk and dv are written once, without atomics (deterministic), and keys past
// kv_lens[b] get zero gradient.
//
// kv_lens travel by value in the kernel parameters (up to kAttentionBatchPerLaunch entries per
// launch; larger batches take several launches), so no host->device upload or sync is needed.
// Launchers enqueue on `stream`, never synchronize, and allocate nothing (the backward takes a
// workspace of AttentionBackwardWorkspaceFloats floats).
//
// Thread-safety: launchers may be called from any thread; ordering is that of `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/cuda/kernel_types.h"

namespace sy::cuda {

inline constexpr int64_t kAttentionBatchPerLaunch = 256;

struct AttentionShape {
  int64_t batch = 0;
  int64_t q_len = 0;     // T
  int64_t kv_len = 0;    // S, the capacity of k and v
  int64_t q_heads = 0;   // Hq
  int64_t kv_heads = 0;  // Hkv, divides Hq
  int64_t head_dim = 0;  // D
  float scale = 1.0f;
};

// Dynamic shared memory the kernels need for head dim D; the caller checks it against the device's
// opt-in limit before launching.
size_t AttentionForwardSharedBytes(int64_t head_dim);
size_t AttentionBackwardSharedBytes(int64_t head_dim);  // the larger of the two backward kernels

// kv_lens: host array of shape.batch valid lengths (validated by the caller: q_len <= len <= S).
// lse may be null.
void LaunchAttention(FloatIn q, FloatIn k, FloatIn v, FloatOut out, float* lse,
                     const AttentionShape& shape, const int32_t* kv_lens, cudaStream_t stream);

int64_t AttentionBackwardWorkspaceFloats(const AttentionShape& shape);
// Overwrites dq, dk and dv.
void LaunchAttentionBackward(FloatIn q, FloatIn k, FloatIn v, FloatIn out, const float* lse,
                             FloatIn dout, FloatOut dq, FloatOut dk, FloatOut dv,
                             const AttentionShape& shape, const int32_t* kv_lens, float* workspace,
                             cudaStream_t stream);

}  // namespace sy::cuda
