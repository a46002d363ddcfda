// The element-wise update kernels of the optimizers, over one range of flat fp32 buffers.
//
// Every kernel has a plain scalar reference version beside it (…Reference), which the tests use to
// check the vectorised one bit for bit. Both reproduce torch.optim's CPU arithmetic operation by
// operation, with the same float32 rounding and the same fused multiply-adds, so results agree
// with PyTorch to the last bit or nearly so:
//
//   AdamW / Adam (torch.optim._single_tensor_adamw / _adam, amsgrad off, maximize off):
//     g  = fma(p, l2, g)                      Adam only (grad.add(param, alpha=wd))
//     p  = p * decay_factor                   AdamW only (param.mul_(1 - lr * wd))
//     m  = fma(g, 1 - beta1, m * beta1)       exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
//     v  = fma((1 - beta2) * g, g, v * beta2) exp_avg_sq.mul_(beta2).addcmul_(grad, grad, ...)
//     p  = p + (neg_step_size * m) / (sqrt(v) / bias_correction2_sqrt + eps)   param.addcdiv_
//
//   SGD (torch.optim._single_tensor_sgd):
//     d  = fma(p, weight_decay, g)            when weight_decay != 0
//     b  = d on the first step, else fma(d, 1 - dampening, b * momentum)   when momentum != 0
//     d  = nesterov ? fma(b, momentum, d) : b
//     p  = fma(d, -lr, p)
//
// The per-step scalars are computed once per buffer in double, then rounded to float where torch
// hands a Python float to a float32 tensor op (Make…StepScalars).
//
// This header includes no CUDA or runtime headers so that optim/cuda/adamw.cu can share the
// scalar structs. The library is built with -ffp-contract=off so that the compiler never fuses
// an operation torch rounds separately.
//
// Ownership: the kernels read and write caller-owned buffers, which must not overlap.
// Thread-safety: pure functions of their arguments; concurrent calls on
// disjoint ranges are safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sy {

struct OptimizerOptions;

// The float scalars of one Adam/AdamW step of one buffer.
struct AdamStepScalars {
  float beta1 = 0;                  // m *= beta1
  float one_minus_beta1 = 0;        // m += (1 - beta1) * g
  float beta2 = 0;                  // v *= beta2
  float one_minus_beta2 = 0;        // v += (1 - beta2) * g * g
  float bias_correction2_sqrt = 0;  // sqrt(1 - beta2^step)
  float eps = 0;                    // added to the denominator
  float neg_step_size = 0;          // -lr / (1 - beta1^step)
  float decay_factor = 1;           // AdamW: 1 - lr * weight_decay; Adam: 1 (skipped)
  float l2 = 0;                     // Adam: weight_decay added to the gradient; AdamW: 0 (skipped)
};

// `step` counts this update: 1 on the first call. options.kind must be kAdam or kAdamW (checked).
AdamStepScalars MakeAdamStepScalars(const OptimizerOptions& options, double lr, int64_t step);

// Updates param, m and v in place over n elements.
void AdamUpdate(const AdamStepScalars& s, float* param, const float* grad, float* m, float* v,
                size_t n);
void AdamUpdateReference(const AdamStepScalars& s, float* param, const float* grad, float* m,
                         float* v, size_t n);

// The float scalars of one SGD step of one buffer.
struct SgdStepScalars {
  float weight_decay = 0;         // L2 coefficient (0: skipped)
  float momentum = 0;             // 0: no momentum buffer
  float one_minus_dampening = 1;  // 1 - dampening
  float neg_lr = 0;               // -lr
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is initialised to the gradient, as torch does
};

// `step` counts this update: 1 on the first call. options.kind must be kSgd (checked).
SgdStepScalars MakeSgdStepScalars(const OptimizerOptions& options, double lr, int64_t step);

// Updates param (and the momentum buffer, when s.momentum != 0) in place over n elements.
// `momentum_buffer` may be null when s.momentum == 0.
void SgdUpdate(const SgdStepScalars& s, float* param, const float* grad, float* momentum_buffer,
               size_t n);
void SgdUpdateReference(const SgdStepScalars& s, float* param, const float* grad,
                        float* momentum_buffer, size_t n);

}  // namespace sy
