#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "runtime/core/check.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SY_OPTIM_AVX2 1
#else
#define SY_OPTIM_AVX2 0
#endif

namespace sy {
namespace {

// Fixed, thread-count-independent unit of the norm reduction and of the scaling.
constexpr size_t kChunkElems = 65536;

struct Chunk {
  float* data;
  size_t n;
};

std::vector<Chunk> MakeChunks(std::span<const std::span<float>> grads) {
  std::vector<Chunk> chunks;
  for (std::span<float> g : grads) {
    for (size_t begin = 0; begin < g.size(); begin += kChunkElems) {
      chunks.push_back({g.data() + begin, std::min(kChunkElems, g.size() - begin)});
    }
  }
  return chunks;
}

void RunChunks(const std::vector<Chunk>& chunks, ThreadPool* pool,
               const std::function<void(size_t)>& body) {
  auto range = [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) body(static_cast<size_t>(i));
  };
  if (pool == nullptr || chunks.size() <= 1) {
    range(0, static_cast<int64_t>(chunks.size()));
  } else {
    pool->ParallelFor(static_cast<int64_t>(chunks.size()), 1, range);
  }
}

double SumOfSquares(const float* x, size_t n) {
  size_t i = 0;
  double total = 0.0;
#if SY_OPTIM_AVX2
  __m256d acc0 = _mm256_setzero_pd();
  __m256d acc1 = _mm256_setzero_pd();
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    acc0 = _mm256_fmadd_pd(lo, lo, acc0);
    acc1 = _mm256_fmadd_pd(hi, hi, acc1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < n; ++i) total += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return total;
}

void ScaleInPlace(float* x, size_t n, float factor) {
  size_t i = 0;
#if SY_OPTIM_AVX2
  const __m256 f = _mm256_set1_ps(factor);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), f));
#endif
  for (; i < n; ++i) x[i] *= factor;
}

}  // namespace

float GlobalGradNorm(std::span<const std::span<float>> grads, ThreadPool* pool) {
  std::vector<Chunk> chunks = MakeChunks(grads);
  std::vector<double> partial(chunks.size());
  RunChunks(chunks, pool,
            [&](size_t i) { partial[i] = SumOfSquares(chunks[i].data, chunks[i].n); });
  double total = 0.0;
  for (double p : partial) total += p;
  return static_cast<float>(std::sqrt(total));
}

void ScaleGrads(std::span<const std::span<float>> grads, float factor, ThreadPool* pool) {
  std::vector<Chunk> chunks = MakeChunks(grads);
  RunChunks(chunks, pool, [&](size_t i) { ScaleInPlace(chunks[i].data, chunks[i].n, factor); });
}

float ClipGradNorm(std::span<const std::span<float>> grads, float max_norm, ThreadPool* pool) {
  SY_CHECK(max_norm > 0.0f && std::isfinite(max_norm))
      << "ClipGradNorm max_norm " << max_norm << " must be finite and > 0";
  float norm = GlobalGradNorm(grads, pool);
  if (!std::isfinite(norm)) return norm;
  // float32 arithmetic, as torch's tensor expression max_norm / (total_norm + 1e-6).
  float coef = max_norm / (norm + 1e-6f);
  if (coef < 1.0f) ScaleGrads(grads, coef, pool);
  return norm;
}

float UnscaleAndClipFactor(float scaled_norm, float inv_scale, float max_norm, float* norm) {
  SY_CHECK(inv_scale > 0.0f && std::isfinite(inv_scale))
      << "UnscaleAndClipFactor inv_scale " << inv_scale << " must be finite and > 0";
  SY_CHECK(max_norm >= 0.0f && std::isfinite(max_norm))
      << "UnscaleAndClipFactor max_norm " << max_norm << " must be finite and >= 0";
  *norm = scaled_norm * inv_scale;
  if (!std::isfinite(*norm)) return 1.0f;
  float factor = inv_scale;
  if (max_norm > 0.0f) {
    const float coef = max_norm / (*norm + 1e-6f);  // as ClipGradNorm
    if (coef < 1.0f) factor *= coef;
  }
  return factor;
}

float UnscaleAndClipGradNorm(std::span<const std::span<float>> grads, float inv_scale,
                             float max_norm, ThreadPool* pool) {
  float norm = 0.0f;
  const float factor =
      UnscaleAndClipFactor(GlobalGradNorm(grads, pool), inv_scale, max_norm, &norm);
  if (factor != 1.0f) ScaleGrads(grads, factor, pool);
  return norm;
}

}  // namespace sy
