// libFuzzer target for the expert popularity profile parser (inference/offload/expert_profile.h).
// Any input must parse or give a Status; a profile that parses must serialise and parse back to
// the same counts, and its popularity order must list every expert once.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string_view>

#include "inference/offload/expert_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto profile = sy::offload::ParseExpertProfile(text, "fuzz.json");
  if (!profile.ok()) return 0;
  auto again = sy::offload::ParseExpertProfile(profile->ToJson(), "fuzz.json (round trip)");
  if (!again.ok() || again->counts != profile->counts) __builtin_trap();
  const auto popular = profile->Popular();
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (const auto& key : popular) seen.insert({key.layer, key.expert});
  if (seen.size() != popular.size()) __builtin_trap();
  return 0;
}
