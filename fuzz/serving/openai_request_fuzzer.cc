// libFuzzer target for the request-body parsers of `switchyard serve`
// (launcher/serving/openai_request.h). Input: any bytes, parsed as a completion body, a chat body,
// a /tokenize and a /detokenize body. Each must parse or give a Status; what parses must be inside
// the documented bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/serving/openai_request.h"

namespace {

void CheckParams(const sy::serving::SamplingParams& p) {
  using namespace sy::serving;
  if (p.max_tokens && (*p.max_tokens < 1 || *p.max_tokens > kMaxTokensLimit)) __builtin_trap();
  if (!(p.temperature >= 0.0f && p.temperature <= 2.0f)) __builtin_trap();
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) __builtin_trap();
  if (p.top_k < 0) __builtin_trap();
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) __builtin_trap();
  if (p.logprobs < -1 || p.logprobs > sy::kMaxTopLogprobs) __builtin_trap();
  if (p.n < 1 || p.n > kMaxChoices) __builtin_trap();
  if (p.logit_bias.size() > kMaxLogitBias) __builtin_trap();
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || !(bias >= -100.0f && bias <= 100.0f)) __builtin_trap();
  }
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) __builtin_trap();
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) __builtin_trap();
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) __builtin_trap();
  if (p.stop.size() > kMaxStopStrings) __builtin_trap();
  for (const auto& s : p.stop) {
    if (s.empty() || s.size() > kMaxStopBytes) __builtin_trap();
  }
  if (p.stop_token_ids.size() > kMaxStopTokenIds) __builtin_trap();
  for (const int32_t id : p.stop_token_ids) {
    if (id < 0) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto completion = sy::serving::ParseCompletionRequest(body);
  if (completion.ok()) {
    CheckParams(completion->params);
    // Exactly one of text and ids; an id prompt is never empty.
    if (completion->prompt_text.has_value() == !completion->prompt_ids.empty()) __builtin_trap();
    for (const int32_t id : completion->prompt_ids) {
      if (id < 0) __builtin_trap();
    }
  }
  auto chat = sy::serving::ParseChatRequest(body);
  if (chat.ok()) {
    CheckParams(chat->params);
    if (chat->messages.empty() || chat->messages.size() > sy::serving::kMaxMessages) {
      __builtin_trap();
    }
    for (const auto& m : chat->messages) {
      if (m.role.empty()) __builtin_trap();
    }
  }
  auto tokenize = sy::serving::ParseTokenizeRequest(body);
  // Exactly one of a text and a chat.
  if (tokenize.ok() && tokenize->prompt.has_value() == !tokenize->messages.empty()) {
    __builtin_trap();
  }
  auto detokenize = sy::serving::ParseDetokenizeRequest(body);
  if (detokenize.ok()) {
    for (const int32_t id : detokenize->tokens) {
      if (id < 0) __builtin_trap();
    }
  }
  return 0;
}
