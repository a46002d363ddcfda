// libFuzzer target for the Hugging Face config.json parser (inference/hf_config.h). Input: the
// bytes of a config.json. Parsing must return a config or a Status naming the problem (never
// crash or hang), and a config it returns must pass ModelConfig::Validate.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "inference/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  sy::Result<sy::HfModelConfig> parsed = sy::ParseHfConfig(text, "config.json");
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) __builtin_trap();
    return 0;
  }
  if (!parsed->config.Validate().ok()) __builtin_trap();
  return 0;
}
