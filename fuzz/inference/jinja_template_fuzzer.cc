// libFuzzer target for the chat-template renderer (inference/jinja_template.h). Input: a template,
// a NUL byte, then a JSON context (when it parses as an object; else the template renders with
// a few chat messages). Any input must parse or give a Status, and render or give a Status, within
// the renderer's bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "inference/jinja_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string_view context_text = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  auto parsed = sy::JinjaTemplate::Parse(source);
  if (!parsed.ok()) return 0;
  nlohmann::ordered_json context = nlohmann::ordered_json::parse(
      context_text.begin(), context_text.end(), nullptr, /*allow_exceptions=*/false);
  if (context.is_discarded() || !context.is_object()) {
    context = {{"messages",
                {{{"role", "user"}, {"content", "hi"}},
                 {{"role", "assistant"}, {"content", "<think>x</think>y"}}}},
               {"add_generation_prompt", true},
               {"bos_token", "<s>"},
               {"eos_token", "</s>"}};
  }
  auto out = parsed->Render(context);
  if (out.ok() && out->size() > sy::JinjaTemplate::kMaxOutputBytes) __builtin_trap();
  return 0;
}
