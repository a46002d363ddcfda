// The request bodies of the OpenAI-compatible endpoints `switchyard serve` answers
// (docs/serving.md): POST /v1/completions and POST /v1/chat/completions, and vLLM's POST /tokenize
// and POST /detokenize, parsed from untrusted JSON into checked values.
//
// A body is refused, with InvalidArgument naming the field and what it accepts, when it is not a
// JSON object, is larger than kMaxBodyBytes, nests deeper or repeats a key (storage::
// ParseStrictJson, storage/formats/text_file.h, parses it), has a field of the wrong type or out of
// range, has a field this server does not know, or asks for something it does not do (echo, suffix,
// best_of > 1, tools on a completion, a schema keyword outside inference/json_grammar.h's
// subset): refused, never ignored, so a client never gets an answer computed differently from
// what it asked for. `user` (an end-user id) changes nothing and is taken. Whether a request fits
// the model (its context, its vocabulary, the served model's name) is for the server to check;
// these parsers know no model.
//
// Defaults are the OpenAI API's: temperature 1, top_p 1, no stop; max_tokens 16 for a completion
// and "up to the context" for a chat. seed: none (the server draws one).
//
// Ownership: values. Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inference/json_grammar.h"
#include "inference/token_logprobs.h"
#include "runtime/core/status.h"

namespace sy::serving {

inline constexpr size_t kMaxBodyBytes = 8u << 20;  // 8 MiB
inline constexpr size_t kMaxStopStrings = 4;       // as the OpenAI API
inline constexpr size_t kMaxStopBytes = 1024;      // per stop string
inline constexpr size_t kMaxStopTokenIds = 1024;
inline constexpr size_t kMaxMessages = 4096;
inline constexpr int64_t kMaxChoices = 16;           // 'n' at most
inline constexpr size_t kMaxLogitBias = 300;         // as the OpenAI API
inline constexpr int64_t kMaxTokensLimit = 1 << 24;  // larger max_tokens are refused as absurd
inline constexpr size_t kMaxSchemaMembers = 4096;    // names in a response_format schema or tools
inline constexpr size_t kMaxTools = 128;

// What both endpoints take besides the prompt.
struct SamplingParams {
  int32_t n = 1;  // answers to draw for the prompt, 1 .. kMaxChoices
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage: a last chunk with usage
  std::optional<int64_t> max_tokens;  // >= 1; none: the endpoint's default
  float temperature = 1.0f;           // [0, 2]; 0: greedy
  float top_p = 1.0f;                 // (0, 1]
  int32_t top_k = 0;                  // >= 0 (-1 is read as 0); 0: off. An extension, as vLLM's
  float min_p = 0.0f;                 // [0, 1]; 0: off. An extension, as vLLM's
  float repetition_penalty = 1.0f;    // (0, 10]; 1: off. An extension, as vLLM's
  float presence_penalty = 0.0f;      // [-2, 2]
  float frequency_penalty = 0.0f;     // [-2, 2]
  // logit_bias: {"token id": bias in [-100, 100]}, at most kMaxLogitBias entries.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // -1: none. Else each token's log-probability and this many alternatives (0 ..
  // kMaxTopLogprobs): a completion's 'logprobs' count, a chat's 'top_logprobs' with 'logprobs'.
  int32_t logprobs = -1;
  std::optional<uint64_t> seed;         // any integer (negative ones wrap)
  std::vector<std::string> stop;        // up to kMaxStopStrings, each 1..kMaxStopBytes bytes
  std::vector<int32_t> stop_token_ids;  // extension (vLLM's name): these tokens end the answer
  bool ignore_eos = false;              // extension: do not stop at the model's end token
  // response_format json_object or json_schema: the grammar the answer is constrained to
  // (inference/json_grammar.h); null for text.
  std::shared_ptr<const Grammar> grammar;
};

struct CompletionRequest {
  std::string model;  // "" when absent
  // The prompt: text, or token ids when the body gave ids (then prompt_text is unset).
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
};

struct ChatMessage {
  std::string role;     // system, user, assistant, tool or developer
  std::string content;  // the text parts joined
  // An assistant's "tool_calls" ([{id, type, function: {name, arguments}}]), a tool message's
  // "tool_call_id", a "name": as the chat template sees them; null when none.
  nlohmann::ordered_json fields;
};

// tool_choice: whether and how the answer calls the request's tools (docs/serving.md, "Tools").
struct ToolChoice {
  enum Kind : uint8_t { kNone, kAuto, kRequired, kNamed } kind = kNone;
  std::string name;  // kNamed: the function
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;  // 1 .. kMaxMessages
  // chat_template_kwargs (vLLM's): an object of extra template variables, or null.
  nlohmann::json chat_template_kwargs;
  // tools: null, or the functions ([{"type": "function", "function": {"name", "description",
  // "parameters", "strict"}}], at most kMaxTools), their members in the order the body gives.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice;           // default: auto with tools, none without
  bool parallel_tool_calls = true;  // false: an answer's first call only
  SamplingParams params;
};

// The body of POST /v1/completions. `prompt` is a string, an array of token ids, or a one-element
// array of either (the API's batch form, with one prompt).
Result<CompletionRequest> ParseCompletionRequest(std::string_view body);

// The body of POST /v1/chat/completions. A message's content is a string, null (an assistant
// message), or an array of {"type": "text", "text": ...} parts.
Result<ChatRequest> ParseChatRequest(std::string_view body);

// POST /tokenize (vLLM's shape): a text {"prompt": "..."}, or a chat {"messages": [...]} to render
// through the model's template (add_generation_prompt, default true). Exactly one of the two.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;  // set for a text
  std::vector<ChatMessage> messages;  // a chat otherwise
  bool add_generation_prompt = true;
  nlohmann::json chat_template_kwargs;  // as ChatRequest's
  nlohmann::ordered_json tools;         // as ChatRequest's
};
Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body);

// POST /detokenize: {"tokens": [ids]}.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
Result<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body);

}  // namespace sy::serving
