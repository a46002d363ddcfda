#include "optim/loss_scaler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#define SY_OPTIM_AVX2 1
#else
#define SY_OPTIM_AVX2 0
#endif

namespace sy {
namespace {

constexpr size_t kChunkElems = 65536;

// Scales x in place; returns true when some element was not finite.
bool UnscaleChunk(float* x, size_t n, float inv_scale) {
  size_t i = 0;
  bool non_finite = false;
#if SY_OPTIM_AVX2
  const __m256 factor = _mm256_set1_ps(inv_scale);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(INFINITY);
  __m256 all_finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    // |v| < inf is false for inf and for NaN (ordered compare).
    all_finite =
        _mm256_and_ps(all_finite, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), inf, _CMP_LT_OQ));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(v, factor));
  }
  non_finite = _mm256_movemask_ps(all_finite) != 0xff;
#endif
  for (; i < n; ++i) {
    if (!std::isfinite(x[i])) non_finite = true;
    x[i] *= inv_scale;
  }
  return non_finite;
}

}  // namespace

bool UnscaleGradsAndCheckNonFinite(std::span<const std::span<float>> grads, float inv_scale,
                                   ThreadPool* pool) {
  struct Chunk {
    float* data;
    size_t n;
  };
  std::vector<Chunk> chunks;
  for (std::span<float> g : grads) {
    for (size_t begin = 0; begin < g.size(); begin += kChunkElems) {
      chunks.push_back({g.data() + begin, std::min(kChunkElems, g.size() - begin)});
    }
  }
  std::atomic<bool> found{false};
  auto range = [&](int64_t first, int64_t last) {
    bool local = false;
    for (int64_t i = first; i < last; ++i) {
      const Chunk& c = chunks[static_cast<size_t>(i)];
      local |= UnscaleChunk(c.data, c.n, inv_scale);
    }
    if (local) found.store(true, std::memory_order_relaxed);
  };
  if (pool == nullptr || chunks.size() <= 1) {
    range(0, static_cast<int64_t>(chunks.size()));
  } else {
    pool->ParallelFor(static_cast<int64_t>(chunks.size()), 1, range);
  }
  return found.load();
}

Status ValidateLossScalerOptions(const LossScalerOptions& options) {
  auto bad = [](const char* field, double value, const char* range) {
    return InvalidArgumentError(std::string("loss_scaler.") + field + " is " +
                                std::to_string(value) + "; it must be " + range);
  };
  if (!(options.init_scale > 0.0 && options.init_scale <= 3.4e38)) {
    return bad("init_scale", options.init_scale, "a finite float32 > 0, e.g. 65536");
  }
  if (!(options.growth_factor > 1.0 && std::isfinite(options.growth_factor))) {
    return bad("growth_factor", options.growth_factor, "finite and > 1, e.g. 2.0");
  }
  if (!(options.backoff_factor > 0.0 && options.backoff_factor < 1.0)) {
    return bad("backoff_factor", options.backoff_factor, "in (0, 1), e.g. 0.5");
  }
  if (options.growth_interval < 1) {
    return InvalidArgumentError("loss_scaler.growth_interval is " +
                                std::to_string(options.growth_interval) +
                                "; it must be >= 1 step, e.g. 2000");
  }
  return Status::Ok();
}

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {}

Result<DynamicLossScaler> DynamicLossScaler::Create(const LossScalerOptions& options) {
  SY_RETURN_IF_ERROR(ValidateLossScalerOptions(options));
  return DynamicLossScaler(options);
}

bool DynamicLossScaler::UnscaleGradsAndCheckNonFinite(std::span<const std::span<float>> grads,
                                                      ThreadPool* pool) const {
  return sy::UnscaleGradsAndCheckNonFinite(grads, inv_scale(), pool);
}

void DynamicLossScaler::Update(bool found_non_finite) {
  if (found_non_finite) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  int64_t successful = growth_tracker_ + 1;
  if (successful == options_.growth_interval) {
    float grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
}

Status DynamicLossScaler::Restore(const State& state) {
  if (!(state.scale > 0.0f && std::isfinite(state.scale))) {
    return InvalidArgumentError("loss scaler state: scale " + std::to_string(state.scale) +
                                " must be finite and > 0; the checkpoint is corrupt");
  }
  if (state.growth_tracker < 0 || state.growth_tracker >= options_.growth_interval) {
    return InvalidArgumentError(
        "loss scaler state: growth_tracker " + std::to_string(state.growth_tracker) +
        " is outside [0, growth_interval = " + std::to_string(options_.growth_interval) +
        "); restore with the growth_interval the checkpoint was written with");
  }
  scale_ = state.scale;
  growth_tracker_ = state.growth_tracker;
  return Status::Ok();
}

}  // namespace sy
