#include "runtime/core/device.h"

#include <charconv>

namespace sy {

std::string Device::ToString() const {
  switch (type) {
    case DeviceType::kCpu:
      return "cpu";
    case DeviceType::kSim:
      return "sim";
    case DeviceType::kCuda:
      return "cuda:" + std::to_string(index);
  }
  return "?";
}

Result<Device> ParseDevice(std::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "sim") return Device::Sim();
  if (text == "cuda") return Device::Cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) {
      return Device::Cuda(index);
    }
  }
  return InvalidArgumentError("unknown device '" + std::string(text) +
                              "': expected cpu, sim, cuda or cuda:N");
}

}  // namespace sy
