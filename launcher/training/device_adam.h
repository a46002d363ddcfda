// DeviceAdam: the Adam/AdamW step of a one-process run on a CUDA device, done on the device. The
// parameters, their gradients and both moments stay in GPU memory; the gradient norm is summed
// there (optim/cuda/grad_norm_cuda.h) and each parameter is updated by the fused kernel
// (optim/cuda/adamw_cuda.h), bit for bit the CPU's AdamUpdate. Without it the trainer copies
// every gradient to the host, steps there and copies every parameter back: on an H200 with a
// 592M-parameter model that host step took 0.46 s of a 0.79 s step (docs/gpu-validation.md).
//
// The host copies in ParamState (host_value, m, v) are not kept current: SyncToHost brings them
// up to date (before a checkpoint is written) and SyncToDevice loads them back (after one is
// read). The step counters (ParamState::opt_step) are the host's, as on the CPU.
//
// Mixed precision (a parameter whose value is the model's 16-bit compute copy, param_state.h):
// its f32 master lives on the device beside it, the fused kernel updates the master and writes
// the copy's rounding in the same pass, and SyncToHost / SyncToDevice move the master.
//
// Ownership: the states and the backend must outlive the DeviceAdam; it owns the device moments.
// Thread-safety: none; the trainer's thread. Work is enqueued on the backend's compute stream, in
// order with the model's operators.
#pragma once

#include <memory>
#include <vector>

#include "launcher/training/param_state.h"
#include "optim/optimizer_options.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"

namespace sy::launcher {

class DeviceAdam {
 public:
  // True when this build and `backend` can step `options` on the device: a CUDA backend and an
  // Adam or AdamW optimizer.
  static bool Supported(const Backend& backend, const OptimizerOptions& options);

  // Allocates the device moments, zeroed. The states need no host gradient or moments: the
  // gradients stay on the device, and SyncToHost sizes m and v when a checkpoint asks.
  static Result<std::unique_ptr<DeviceAdam>> Create(Backend& backend,
                                                    const OptimizerOptions& options,
                                                    std::vector<ParamState>* states);
  ~DeviceAdam();
  DeviceAdam(const DeviceAdam&) = delete;
  DeviceAdam& operator=(const DeviceAdam&) = delete;

  // The global L2 norm of every parameter's device gradient, unscaled by `inv_scale` (f16's loss
  // scale: optim/loss_scaler.h); the gradients are then multiplied by UnscaleAndClipFactor
  // (optim/grad_clip.h) where it is not 1: the unscale, and max_norm / (norm + 1e-6) where that is
  // below 1 and max_norm > 0. Waits for the norm (one synchronization).
  float ClipGradNorm(float max_norm, float inv_scale = 1.0f);
  // One optimizer step of every parameter at learning rate `lr` (increments each opt_step).
  void Step(double lr);

  // Copies the device values and moments into the states' host_value, m and v; waits.
  void SyncToHost();
  // Copies the states' host m and v into the device moments, and a 16-bit parameter's host master
  // into its device master (after a checkpoint is loaded; the values are the trainer's to copy);
  // waits.
  void SyncToDevice();

 private:
  struct Moments {
    Tensor m, v;    // device, f32, the parameter's element count; undefined when not needed
    Tensor master;  // device f32 master of a 16-bit parameter; undefined for an f32 one
  };
  DeviceAdam(Backend& backend, const OptimizerOptions& options, std::vector<ParamState>* states);

  // Unused in a build without CUDA, where every method says so instead.
  [[maybe_unused]] Backend& backend_;
  const OptimizerOptions options_;
  [[maybe_unused]] std::vector<ParamState>& states_;
  std::vector<Moments> moments_;
  Tensor partials_;       // device: kSquaredNormPartials doubles per parameter
  Tensor host_partials_;  // host copy of partials_
};

}  // namespace sy::launcher
