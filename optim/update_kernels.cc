#include "optim/update_kernels.h"

#include <cmath>

#include "optim/optimizer_options.h"
#include "runtime/core/check.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SY_OPTIM_AVX2 1
#else
#define SY_OPTIM_AVX2 0
#endif

namespace sy {

AdamStepScalars MakeAdamStepScalars(const OptimizerOptions& options, double lr, int64_t step) {
  SY_CHECK(options.kind == OptimizerKind::kAdam || options.kind == OptimizerKind::kAdamW)
      << "Adam scalars for a " << OptimizerKindName(options.kind) << " optimizer";
  SY_CHECK_GE(step, 1);
  // torch computes these in Python floats (double) and rounds each to float32 at the tensor op.
  double t = static_cast<double>(step);
  double bias_correction1 = 1.0 - std::pow(options.beta1, t);
  double bias_correction2 = 1.0 - std::pow(options.beta2, t);
  AdamStepScalars s;
  s.beta1 = static_cast<float>(options.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - options.beta1);
  s.beta2 = static_cast<float>(options.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - options.beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(options.eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  if (options.kind == OptimizerKind::kAdamW) {
    s.decay_factor = static_cast<float>(1.0 - lr * options.weight_decay);
  } else {
    s.l2 = static_cast<float>(options.weight_decay);
  }
  return s;
}

void AdamUpdateReference(const AdamStepScalars& s, float* param, const float* grad, float* m,
                         float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i];
    float p = param[i];
    if (s.l2 != 0.0f) g = std::fma(p, s.l2, g);
    if (s.decay_factor != 1.0f) p = p * s.decay_factor;
    float mi = std::fma(g, s.one_minus_beta1, m[i] * s.beta1);
    float vi = std::fma(s.one_minus_beta2 * g, g, v[i] * s.beta2);
    float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    m[i] = mi;
    v[i] = vi;
    param[i] = p + (s.neg_step_size * mi) / denom;
  }
}

namespace {

#if SY_OPTIM_AVX2
// The same operations as AdamUpdateReference, eight lanes at a time; the optional terms are
// template parameters so the inner loop carries no branches.
template <bool kL2, bool kDecay>
size_t AdamUpdateAvx2(const AdamStepScalars& s, float* param, const float* grad, float* m, float* v,
                      size_t n) {
  const __m256 beta1 = _mm256_set1_ps(s.beta1);
  const __m256 one_minus_beta1 = _mm256_set1_ps(s.one_minus_beta1);
  const __m256 beta2 = _mm256_set1_ps(s.beta2);
  const __m256 one_minus_beta2 = _mm256_set1_ps(s.one_minus_beta2);
  const __m256 bias_correction2_sqrt = _mm256_set1_ps(s.bias_correction2_sqrt);
  const __m256 eps = _mm256_set1_ps(s.eps);
  const __m256 neg_step_size = _mm256_set1_ps(s.neg_step_size);
  const __m256 decay_factor = _mm256_set1_ps(s.decay_factor);
  const __m256 l2 = _mm256_set1_ps(s.l2);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 p = _mm256_loadu_ps(param + i);
    __m256 g = _mm256_loadu_ps(grad + i);
    if constexpr (kL2) g = _mm256_fmadd_ps(p, l2, g);
    if constexpr (kDecay) p = _mm256_mul_ps(p, decay_factor);
    __m256 mi = _mm256_fmadd_ps(g, one_minus_beta1, _mm256_mul_ps(_mm256_loadu_ps(m + i), beta1));
    __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(one_minus_beta2, g), g,
                                _mm256_mul_ps(_mm256_loadu_ps(v + i), beta2));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bias_correction2_sqrt), eps);
    p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(neg_step_size, mi), denom));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(param + i, p);
  }
  return i;
}
#endif

}  // namespace

void AdamUpdate(const AdamStepScalars& s, float* param, const float* grad, float* m, float* v,
                size_t n) {
  size_t done = 0;
#if SY_OPTIM_AVX2
  bool l2 = s.l2 != 0.0f;
  bool decay = s.decay_factor != 1.0f;
  if (l2 && decay) {
    done = AdamUpdateAvx2<true, true>(s, param, grad, m, v, n);
  } else if (l2) {
    done = AdamUpdateAvx2<true, false>(s, param, grad, m, v, n);
  } else if (decay) {
    done = AdamUpdateAvx2<false, true>(s, param, grad, m, v, n);
  } else {
    done = AdamUpdateAvx2<false, false>(s, param, grad, m, v, n);
  }
#endif
  AdamUpdateReference(s, param + done, grad + done, m + done, v + done, n - done);
}

SgdStepScalars MakeSgdStepScalars(const OptimizerOptions& options, double lr, int64_t step) {
  SY_CHECK(options.kind == OptimizerKind::kSgd)
      << "SGD scalars for a " << OptimizerKindName(options.kind) << " optimizer";
  SY_CHECK_GE(step, 1);
  SgdStepScalars s;
  s.weight_decay = static_cast<float>(options.weight_decay);
  s.momentum = static_cast<float>(options.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - options.dampening);
  s.neg_lr = static_cast<float>(-lr);
  s.nesterov = options.nesterov;
  s.first_step = step == 1;
  return s;
}

void SgdUpdateReference(const SgdStepScalars& s, float* param, const float* grad,
                        float* momentum_buffer, size_t n) {
  bool use_momentum = s.momentum != 0.0f;
  SY_CHECK(!use_momentum || momentum_buffer != nullptr || n == 0)
      << "SGD with momentum needs a momentum buffer";
  for (size_t i = 0; i < n; ++i) {
    float d = grad[i];
    if (s.weight_decay != 0.0f) d = std::fma(param[i], s.weight_decay, d);
    if (use_momentum) {
      float b =
          s.first_step ? d : std::fma(d, s.one_minus_dampening, momentum_buffer[i] * s.momentum);
      momentum_buffer[i] = b;
      d = s.nesterov ? std::fma(b, s.momentum, d) : b;
    }
    param[i] = std::fma(d, s.neg_lr, param[i]);
  }
}

void SgdUpdate(const SgdStepScalars& s, float* param, const float* grad, float* momentum_buffer,
               size_t n) {
  size_t i = 0;
#if SY_OPTIM_AVX2
  bool use_momentum = s.momentum != 0.0f;
  SY_CHECK(!use_momentum || momentum_buffer != nullptr || n == 0)
      << "SGD with momentum needs a momentum buffer";
  bool decay = s.weight_decay != 0.0f;
  const __m256 weight_decay = _mm256_set1_ps(s.weight_decay);
  const __m256 momentum = _mm256_set1_ps(s.momentum);
  const __m256 one_minus_dampening = _mm256_set1_ps(s.one_minus_dampening);
  const __m256 neg_lr = _mm256_set1_ps(s.neg_lr);
  // SGD is memory-bound: the loop-invariant branches cost nothing next to the loads.
  for (; i + 8 <= n; i += 8) {
    __m256 p = _mm256_loadu_ps(param + i);
    __m256 d = _mm256_loadu_ps(grad + i);
    if (decay) d = _mm256_fmadd_ps(p, weight_decay, d);
    if (use_momentum) {
      __m256 b = s.first_step ? d
                              : _mm256_fmadd_ps(
                                    d, one_minus_dampening,
                                    _mm256_mul_ps(_mm256_loadu_ps(momentum_buffer + i), momentum));
      _mm256_storeu_ps(momentum_buffer + i, b);
      d = s.nesterov ? _mm256_fmadd_ps(b, momentum, d) : b;
    }
    _mm256_storeu_ps(param + i, _mm256_fmadd_ps(d, neg_lr, p));
  }
#endif
  SgdUpdateReference(s, param + i, grad + i, momentum_buffer ? momentum_buffer + i : nullptr,
                     n - i);
}

}  // namespace sy
