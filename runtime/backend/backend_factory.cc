#include <memory>

#include "runtime/backend/backend.h"
#include "runtime/core/build_info.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/sim/sim_backend.h"

namespace sy {

bool CudaBackendCompiled() { return SY_HAVE_CUDA != 0; }

Result<std::unique_ptr<Backend>> CreateBackend(Device device, const BackendOptions& options) {
  switch (device.type) {
    case DeviceType::kCpu:
      return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
    case DeviceType::kSim:
      return std::unique_ptr<Backend>(std::make_unique<SimBackend>(options));
    case DeviceType::kCuda:
#if SY_HAVE_CUDA
      return CreateCudaBackend(device.index, options);
#else
      return UnavailableError("device " + device.ToString() +
                              ": this build has no CUDA backend; rebuild with nvcc on PATH "
                              "(-DSY_ENABLE_CUDA=ON)");
#endif
  }
  return InvalidArgumentError("unknown device type");
}

std::vector<Device> AvailableDevices() {
  std::vector<Device> devices = {Device::Cpu(), Device::Sim()};
#if SY_HAVE_CUDA
  int count = CudaDeviceCount();
  for (int i = 0; i < count; ++i) devices.push_back(Device::Cuda(i));
#endif
  return devices;
}

}  // namespace sy
