// libFuzzer target for the ProMoE predictor file parser (inference/offload/expert_predictor.h).
// Any input must parse or give a Status; a predictor that parses must serialise back to the same
// bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "inference/offload/expert_predictor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto predictor = sy::offload::ParseMlpPredictor(bytes, "fuzz.bin");
  if (!predictor.ok()) return 0;
  if (sy::offload::SerializeMlpPredictor(**predictor) != bytes) __builtin_trap();
  return 0;
}
