// libFuzzer target for the tokenizer.json parser and byte-level BPE (inference/tokenizer.h).
// Input: a tokenizer.json, a NUL byte, then text to encode. Any input must parse or give a
// Status; a tokenizer that parses must encode valid UTF-8 (or refuse with a Status), give ids
// inside its vocabulary, and decode them back without error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "inference/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  auto tok = sy::ParseHfTokenizerJson(json, "fuzz.json");
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode(text);
  if (!ids.ok()) return 0;
  for (const int32_t id : *ids) {
    if (id < 0 || id >= (*tok)->vocab_size()) __builtin_trap();
  }
  if (!(*tok)->Decode(*ids).ok()) __builtin_trap();
  return 0;
}
