#include "launcher/serving/openai_response.h"

#include <nlohmann/json.hpp>

#include <vector>

namespace sy::serving {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

json Base(const ResponseHeader& header, bool chunk) {
  const char* object = header.endpoint == Endpoint::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return json{
      {"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model}};
}

json Ids(std::span<const int32_t> ids) {
  return json(std::vector<int32_t>(ids.begin(), ids.end()));
}

json UsageJson(const Usage& usage) {
  return json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json Bytes(const std::string& s) {
  std::vector<int> bytes;
  for (const char c : s) bytes.push_back(static_cast<unsigned char>(c));
  return json(bytes);
}

json LogprobsJson(Endpoint endpoint, Logprobs logprobs) {
  if (logprobs.tokens == nullptr) return nullptr;
  const std::vector<TokenLogprobText>& tokens = *logprobs.tokens;
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprobText& t : tokens) {
      json top = json::array();
      for (const auto& [text, lp] : t.top) {
        top.push_back({{"token", text}, {"logprob", lp}, {"bytes", Bytes(text)}});
      }
      content.push_back({{"token", t.token},
                         {"logprob", t.logprob},
                         {"bytes", Bytes(t.token)},
                         {"top_logprobs", top}});
    }
    return json{{"content", content}};
  }
  json texts = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = logprobs.text_offset;
  for (const TokenLogprobText& t : tokens) {
    texts.push_back(t.token);
    values.push_back(t.logprob);
    json top = json::object();
    for (const auto& [text, lp] : t.top) {
      if (!top.contains(text)) top[text] = lp;  // two ids of one text: the likelier one
    }
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.token.size();
  }
  return json{{"tokens", texts},
              {"token_logprobs", values},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

}  // namespace

// [{"id": "call-<prefix>-<k>", "type": "function", "function": {"name", "arguments"}}], each with
// its "index" in a streamed delta.
json ToolCallsJson(std::span<const ToolCall> calls, std::string_view prefix, bool indexed) {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json call = {{"id", "call-" + std::string(prefix) + "-" + std::to_string(k)},
                 {"type", "function"},
                 {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (indexed) call["index"] = k;
    out.push_back(std::move(call));
  }
  return out;
}

std::string FullResponse(const ResponseHeader& header, std::span<const ChoiceText> choices,
                         const Usage& usage) {
  json out = Base(header, /*chunk=*/false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceText& c = choices[i];
    json choice = {{"index", i},
                   {"logprobs", LogprobsJson(header.endpoint, c.logprobs)},
                   {"finish_reason", c.finish_reason}};
    if (header.endpoint == Endpoint::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] =
            ToolCallsJson(c.tool_calls, c.tool_call_id_prefix, /*indexed=*/false);
      }
    } else {
      choice["text"] = c.text;
    }
    choice["token_ids"] = Ids(c.token_ids);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  return Dump(out);
}

std::string StreamChunk(const ResponseHeader& header, int index, std::string_view text,
                        std::span<const int32_t> token_ids,
                        std::optional<std::string_view> finish_reason, bool first,
                        Logprobs logprobs, std::span<const ToolCall> tool_calls,
                        std::string_view tool_call_id_prefix) {
  json out = Base(header, /*chunk=*/true);
  json choice = {{"index", index}, {"logprobs", LogprobsJson(header.endpoint, logprobs)}};
  choice["finish_reason"] = finish_reason ? json(*finish_reason) : json(nullptr);
  if (header.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish_reason)) delta["content"] = text;
    if (!tool_calls.empty()) {
      delta["tool_calls"] = ToolCallsJson(tool_calls, tool_call_id_prefix, /*indexed=*/true);
    }
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["token_ids"] = Ids(token_ids);
  out["choices"] = json::array({choice});
  return Dump(out);
}

std::string UsageChunk(const ResponseHeader& header, const Usage& usage) {
  json out = Base(header, /*chunk=*/true);
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  return Dump(out);
}

std::string ModelsResponse(std::string_view model, int64_t created) {
  return Dump(json{{"object", "list"},
                   {"data", json::array({json{{"id", model},
                                              {"object", "model"},
                                              {"created", created},
                                              {"owned_by", "switchyard"}}})}});
}

std::string TokenizeResponse(std::span<const int32_t> tokens, int64_t max_model_len) {
  return Dump(json{{"count", tokens.size()},
                   {"max_model_len", max_model_len},
                   {"tokens", std::vector<int32_t>(tokens.begin(), tokens.end())}});
}

std::string DetokenizeResponse(std::string_view text) { return Dump(json{{"prompt", text}}); }

std::string ErrorResponse(std::string_view message, std::string_view type, std::string_view code) {
  return Dump(json{{"error",
                    {{"message", message},
                     {"type", type},
                     {"param", nullptr},
                     {"code", code.empty() ? json(nullptr) : json(code)}}}});
}

std::string SseEvent(std::string_view json_text) {
  std::string out;
  out.reserve(json_text.size() + 8);
  out += "data: ";
  out += json_text;
  out += "\n\n";
  return out;
}

}  // namespace sy::serving
