// Global gradient-norm clipping over many flat gradient buffers, as
// torch.nn.utils.clip_grad_norm_(parameters, max_norm) with norm_type 2.
//
// The total norm is the L2 norm of all buffers taken together. With coef = max_norm / (norm +
// 1e-6) computed in float32, every gradient is multiplied by coef when coef < 1 (torch multiplies
// by min(coef, 1), which is the same). One deliberate difference: when the norm is inf or NaN the
// gradients are left untouched (torch would multiply them by NaN); the returned norm tells the
// caller to skip the step.
//
// The sum of squares is accumulated in double over fixed-size chunks whose partial sums are added
// in a fixed order, so the result does not depend on the number of threads.
//
// Ownership: the buffers are the caller's and are modified in place; `pool` may be null (calling
// thread only). Thread-safety: reentrant; no two calls may touch the same buffers at once.
#pragma once

#include <span>

#include "runtime/core/thread_pool.h"

namespace sy {

// The L2 norm of all `grads` together (inf or NaN when any element is).
float GlobalGradNorm(std::span<const std::span<float>> grads, ThreadPool* pool);

// Clips `grads` in place to a total L2 norm of at most max_norm (> 0, checked) and returns the
// total norm before clipping.
float ClipGradNorm(std::span<const std::span<float>> grads, float max_norm, ThreadPool* pool);

// Multiplies every element of `grads` by `factor` in float32.
void ScaleGrads(std::span<const std::span<float>> grads, float factor, ThreadPool* pool);

// Loss-scaled gradients (optim/loss_scaler.h) are unscaled and clipped by one multiplication, as
// torch's scaler.unscale_ followed by clip_grad_norm_ computes them. Given the norm of the scaled
// gradients and inv_scale (DynamicLossScaler::inv_scale(); 1 without loss scaling), *norm
// receives the unscaled norm, scaled_norm * inv_scale (exact for the scaler's powers of two), and
// the result is the factor to multiply the gradients by: inv_scale, times max_norm / (norm +
// 1e-6) when that is below 1 (max_norm > 0; 0 turns clipping off). A non-finite norm gives 1: the
// gradients stay as they are and the caller skips the step.
float UnscaleAndClipFactor(float scaled_norm, float inv_scale, float max_norm, float* norm);
// GlobalGradNorm, then every gradient times UnscaleAndClipFactor (when it is not 1); returns the
// unscaled norm. With inv_scale 1 this is ClipGradNorm (GlobalGradNorm when max_norm is 0).
float UnscaleAndClipGradNorm(std::span<const std::span<float>> grads, float inv_scale,
                             float max_norm, ThreadPool* pool);

}  // namespace sy
