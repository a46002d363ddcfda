// Device: where a buffer lives and where a backend computes.
//   cpu      host memory, computed on by the CPU backend
//   cuda:N   a CUDA GPU
//   sim      the simulated device: host memory behind a memory budget and a throttled link
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

enum class DeviceType : uint8_t { kCpu, kCuda, kSim };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device Cpu() { return {DeviceType::kCpu, 0}; }
  static Device Cuda(int index) { return {DeviceType::kCuda, index}; }
  static Device Sim() { return {DeviceType::kSim, 0}; }

  // Host code may dereference this device's memory directly.
  bool is_host() const { return type == DeviceType::kCpu; }

  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const;  // "cpu", "cuda:0", "sim"
};

// Parses "cpu", "sim", "cuda" (= cuda:0) and "cuda:N".
Result<Device> ParseDevice(std::string_view text);

}  // namespace sy
