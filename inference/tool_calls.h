// Tool calls in a model's answer, in the format the model's chat template teaches it. Qwen2.5 and
// Qwen3 (and NousResearch's Hermes) templates ask for each call as
//
//   <tool_call>
//   {"name": <function-name>, "arguments": <args-json-object>}
//   </tool_call>
//
// which ParseHermesToolCalls reads back, as vLLM's hermes tool parser does: every block whose JSON
// has a string "name" becomes a call (its "arguments", an object, kept as JSON text); a block that
// does not parse stays in the text. The text outside the blocks, trimmed, is the content.
// HermesToolCallGrammar makes a model write one such block (tool_choice "required" or a named
// function), its arguments a value of the function's parameters schema (inference/json_grammar.h).
//
// Ownership: values. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "inference/json_grammar.h"
#include "runtime/core/status.h"

namespace sy {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
};

struct ParsedToolCalls {
  std::string content;  // the text outside the calls, trimmed
  std::vector<ToolCall> calls;
};

// At most `max_calls` calls (parallel_tool_calls false: 1); later blocks are dropped, text and
// all.
ParsedToolCalls ParseHermesToolCalls(std::string_view text, size_t max_calls = SIZE_MAX);

// Whether a chat template teaches the format above (its text asks for <tool_call> blocks).
bool TemplateUsesHermesToolCalls(std::string_view template_source);

// One <tool_call> block calling one of `functions` (name, parameters schema; a null schema takes
// any object). The errors of Grammar::FromJsonSchema, naming the function.
Result<Grammar> HermesToolCallGrammar(
    const std::vector<std::pair<std::string, nlohmann::ordered_json>>& functions);

}  // namespace sy
