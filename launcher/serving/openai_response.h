// The response bodies of the OpenAI-compatible endpoints (docs/serving.md): a whole completion or
// chat completion, the server-sent-event chunks of a streamed one, the usage chunk, the model
// list and the error body. Each returns compact JSON text; invalid UTF-8 in a text (which the
// server never produces: its text comes from TextStreamer) would be replaced by U+FFFD.
//
// Beyond the API: every choice (and every streamed chunk) carries "token_ids", the ids of the
// tokens it holds, so a client of a model without a tokenizer reads its answer there (its "text"
// is then empty), and any client can check the exact tokens.
//
// Ownership: values. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inference/tool_calls.h"

namespace sy::serving {

enum class Endpoint : uint8_t { kCompletion, kChat };

// What every body of one answer repeats.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletion;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// One generated token's log-probabilities, with its text and that of each alternative (a token's
// bytes, which may be part of a character).
struct TokenLogprobText {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

// A choice's "logprobs": null without `logprobs`; a completion's {tokens, token_logprobs,
// top_logprobs, text_offset} (text_offset counts from `text_offset`, the bytes of the answer
// before these tokens), or a chat's {content: [{token, logprob, bytes, top_logprobs}]}.
struct Logprobs {
  const std::vector<TokenLogprobText>* tokens = nullptr;
  size_t text_offset = 0;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// One choice of a whole answer.
struct ChoiceText {
  std::string_view text;
  std::span<const int32_t> token_ids;
  std::string_view finish_reason;  // "stop", "length" or "tool_calls"
  Logprobs logprobs;
  // A chat's tool calls (then `text` is the content besides them, null when empty); each call's
  // id is "call-<prefix>-<k>".
  std::span<const ToolCall> tool_calls;
  std::string tool_call_id_prefix;
};

// The whole answer: its choices (index 0, 1, ...) and the usage.
std::string FullResponse(const ResponseHeader& header, std::span<const ChoiceText> choices,
                         const Usage& usage);

// One streamed chunk (the JSON after "data: "). A chat's first chunk (`first`) carries the
// assistant role; the last one carries `finish_reason` (and usually no text).
// `tool_calls` (a chat's, with ids as ChoiceText's) go in the delta's "tool_calls".
std::string StreamChunk(const ResponseHeader& header, int index, std::string_view text,
                        std::span<const int32_t> token_ids,
                        std::optional<std::string_view> finish_reason, bool first,
                        Logprobs logprobs = {}, std::span<const ToolCall> tool_calls = {},
                        std::string_view tool_call_id_prefix = "");

// The chunk after the last one when the client asked for stream_options.include_usage: no
// choices, the usage.
std::string UsageChunk(const ResponseHeader& header, const Usage& usage);

// GET /v1/models: the one model served.
std::string ModelsResponse(std::string_view model, int64_t created);

// {"error": {"message", "type", "param", "code"}}: `type` is invalid_request_error (4xx) or
// server_error (5xx); `code` may be empty (null).
std::string ErrorResponse(std::string_view message, std::string_view type,
                          std::string_view code = "");

// POST /tokenize: {"count", "max_model_len" (the server's context per request), "tokens"}.
std::string TokenizeResponse(std::span<const int32_t> tokens, int64_t max_model_len);
// POST /detokenize: {"prompt": text}.
std::string DetokenizeResponse(std::string_view text);

// "data: <json>\n\n", one server-sent event.
std::string SseEvent(std::string_view json);

}  // namespace sy::serving
