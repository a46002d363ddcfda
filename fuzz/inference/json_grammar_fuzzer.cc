// libFuzzer target for response_format's JSON Schema compiler and matcher
// (inference/json_grammar.h). Input: a schema (JSON text), a NUL, then bytes fed to a matcher of
// the compiled grammar one at a time. The compiler must return a grammar or a Status; the matcher
// must keep its invariants: a refused byte changes nothing, and once no byte can follow, none is
// admitted.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "inference/json_grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view schema_text = input.substr(0, nul);
  const std::string_view bytes =
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  const nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  sy::Result<sy::Grammar> grammar = sy::Grammar::FromJsonSchema(schema);
  if (!grammar.ok()) {
    if (grammar.status().message().empty()) __builtin_trap();
    return 0;
  }
  sy::GrammarMatcher matcher(std::make_shared<const sy::Grammar>(std::move(grammar).value()));
  for (const char c : bytes) {
    const std::string before = matcher.Key();
    const bool must_end = matcher.must_end();
    if (!matcher.Advance(static_cast<uint8_t>(c))) {
      if (matcher.Key() != before) __builtin_trap();  // a refused byte changed the state
      continue;
    }
    if (must_end) __builtin_trap();  // a byte admitted where none could follow
  }
  return 0;
}
