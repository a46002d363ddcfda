#include "launcher/training/device_adam.h"

#include <cmath>
#include <utility>

#include "runtime/core/build_info.h"
#include "runtime/core/check.h"

#if SY_HAVE_CUDA
#include "optim/cuda/adamw_cuda.h"
#include "optim/cuda/grad_norm_cuda.h"
#include "optim/grad_clip.h"
#include "optim/update_kernels.h"
#include "runtime/cuda/cuda_backend.h"
#endif

namespace sy::launcher {

bool DeviceAdam::Supported(const Backend& backend, const OptimizerOptions& options) {
  return SY_HAVE_CUDA != 0 && backend.device().type == DeviceType::kCuda &&
         (options.kind == OptimizerKind::kAdamW || options.kind == OptimizerKind::kAdam);
}

DeviceAdam::DeviceAdam(Backend& backend, const OptimizerOptions& options,
                       std::vector<ParamState>* states)
    : backend_(backend), options_(options), states_(*states) {}

DeviceAdam::~DeviceAdam() = default;

#if SY_HAVE_CUDA

namespace {

size_t Elements(const ParamState& s) { return static_cast<size_t>(s.param->value.numel()); }

// A host tensor over a state's moment vector, for a copy to or from the device.
Tensor HostView(std::vector<float>& values, const Shape& shape) {
  return Tensor::Wrap(values.data(), DType::kF32, shape);
}

}  // namespace

Result<std::unique_ptr<DeviceAdam>> DeviceAdam::Create(Backend& backend,
                                                       const OptimizerOptions& options,
                                                       std::vector<ParamState>* states) {
  SY_CHECK(Supported(backend, options)) << "DeviceAdam on " << backend.name();
  std::unique_ptr<DeviceAdam> adam(new DeviceAdam(backend, options, states));
  for (ParamState& s : *states) {
    SY_CHECK(s.param->value.device().type == DeviceType::kCuda &&
             s.param->grad.device().type == DeviceType::kCuda)
        << "DeviceAdam: parameter " << s.param->name << " is not on the GPU";
    Moments moments;
    const Shape shape = s.param->value.shape();
    SY_ASSIGN_OR_RETURN(moments.m, backend.AllocatePersistent(DType::kF32, shape));
    SY_ASSIGN_OR_RETURN(moments.v, backend.AllocatePersistent(DType::kF32, shape));
    backend.Fill(moments.m, 0.0f);
    backend.Fill(moments.v, 0.0f);
    if (s.param->value.dtype() != DType::kF32) {
      // Mixed precision: the trainer's f32 master goes to the device, beside the 16-bit value.
      SY_ASSIGN_OR_RETURN(moments.master, backend.AllocatePersistent(DType::kF32, shape));
      backend.CopyAsync(s.host_value, moments.master, backend.compute_stream());
    }
    adam->moments_.push_back(std::move(moments));
  }
  const int64_t partial_floats =
      2 * static_cast<int64_t>(kSquaredNormPartials) * static_cast<int64_t>(states->size());
  SY_ASSIGN_OR_RETURN(adam->partials_,
                      backend.AllocatePersistent(DType::kF32, Shape{partial_floats}));
  adam->host_partials_ = Tensor::Host(DType::kF32, Shape{partial_floats});
  backend.SynchronizeStream(backend.compute_stream());
  return adam;
}

float DeviceAdam::ClipGradNorm(float max_norm, float inv_scale) {
  void* stream = CudaComputeStream(backend_);
  auto* partials = static_cast<double*>(partials_.data());
  for (size_t i = 0; i < states_.size(); ++i) {
    LaunchSquaredNormPartialsCuda(states_[i].param->grad.data<float>(), Elements(states_[i]),
                                  partials + i * kSquaredNormPartials, stream);
  }
  backend_.CopyAsync(partials_, host_partials_, backend_.compute_stream());
  backend_.SynchronizeStream(backend_.compute_stream());
  // Parameter by parameter, block by block: the same order every step.
  double total = 0.0;
  const double* host = static_cast<const double*>(host_partials_.data());
  for (size_t k = 0; k < states_.size() * kSquaredNormPartials; ++k) total += host[k];
  // float32 arithmetic, as UnscaleAndClipGradNorm (optim/grad_clip.cc) and torch.
  float norm = 0.0f;
  const float factor =
      UnscaleAndClipFactor(static_cast<float>(std::sqrt(total)), inv_scale, max_norm, &norm);
  if (factor != 1.0f) {
    for (ParamState& s : states_) {
      LaunchScaleInPlaceCuda(s.param->grad.data<float>(), Elements(s), factor, stream);
    }
  }
  return norm;
}

void DeviceAdam::Step(double lr) {
  SY_CHECK(std::isfinite(lr) && lr >= 0.0) << "learning rate " << lr << " is not finite and >= 0";
  void* stream = CudaComputeStream(backend_);
  for (size_t i = 0; i < states_.size(); ++i) {
    ParamState& s = states_[i];
    const AdamStepScalars scalars = MakeAdamStepScalars(options_, lr, ++s.opt_step);
    // A 16-bit parameter: its device master steps, and the value is its rounding, same pass.
    const bool mixed = moments_[i].master.defined();
    float* master = mixed ? moments_[i].master.data<float>() : s.param->value.data<float>();
    LaunchAdamUpdateCuda(scalars, master, s.param->grad.data<float>(), moments_[i].m.data<float>(),
                         moments_[i].v.data<float>(), Elements(s),
                         mixed ? s.param->value.data() : nullptr,
                         mixed ? s.param->value.dtype() : DType::kBF16, stream);
  }
}

void DeviceAdam::SyncToHost() {
  for (size_t i = 0; i < states_.size(); ++i) {
    ParamState& s = states_[i];
    const Shape shape = s.param->value.shape();
    const Tensor& master = moments_[i].master.defined() ? moments_[i].master : s.param->value;
    backend_.CopyAsync(master, s.host_value, backend_.compute_stream());
    s.m.resize(Elements(s));
    s.v.resize(Elements(s));
    backend_.CopyAsync(moments_[i].m, HostView(s.m, shape), backend_.compute_stream());
    backend_.CopyAsync(moments_[i].v, HostView(s.v, shape), backend_.compute_stream());
  }
  backend_.SynchronizeStream(backend_.compute_stream());
}

void DeviceAdam::SyncToDevice() {
  for (size_t i = 0; i < states_.size(); ++i) {
    ParamState& s = states_[i];
    const Shape shape = s.param->value.shape();
    if (s.m.size() == Elements(s)) {
      backend_.CopyAsync(HostView(s.m, shape), moments_[i].m, backend_.compute_stream());
    }
    if (s.v.size() == Elements(s)) {
      backend_.CopyAsync(HostView(s.v, shape), moments_[i].v, backend_.compute_stream());
    }
    if (moments_[i].master.defined()) {
      backend_.CopyAsync(s.host_value, moments_[i].master, backend_.compute_stream());
    }
  }
  backend_.SynchronizeStream(backend_.compute_stream());
}

#else  // !SY_HAVE_CUDA: Supported is false, so none of these is reached.

Result<std::unique_ptr<DeviceAdam>> DeviceAdam::Create(Backend& backend, const OptimizerOptions&,
                                                       std::vector<ParamState>*) {
  return UnimplementedError("DeviceAdam on " + backend.name() + ": this build has no CUDA");
}
float DeviceAdam::ClipGradNorm(float, float) {
  SY_CHECK(false) << "DeviceAdam without CUDA";
  return 0.0f;
}
void DeviceAdam::Step(double) { SY_CHECK(false) << "DeviceAdam without CUDA"; }
void DeviceAdam::SyncToHost() { SY_CHECK(false) << "DeviceAdam without CUDA"; }
void DeviceAdam::SyncToDevice() { SY_CHECK(false) << "DeviceAdam without CUDA"; }

#endif

}  // namespace sy::launcher
