#pragma once
#include "runtime/cpu/cpu_backend.h"
namespace sy {
class SimBackend : public CpuBackend {
 public:
  explicit SimBackend(const BackendOptions& options) : CpuBackend(options) {}
};
}  // namespace sy
