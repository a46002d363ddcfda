#include "inference/tool_calls.h"

namespace sy {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string_view Trim(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

}  // namespace

ParsedToolCalls ParseHermesToolCalls(std::string_view text, size_t max_calls) {
  ParsedToolCalls out;
  std::string content;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    const size_t body = open + kOpen.size();
    size_t close = text.find(kClose, body);
    // An answer cut by max_tokens may end inside its last block: read what is there.
    const size_t end = close == std::string_view::npos ? text.size() : close;
    const nlohmann::json call =
        nlohmann::json::parse(Trim(text.substr(body, end - body)), nullptr, false);
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string() ||
        (call.contains("arguments") && !call["arguments"].is_object())) {
      content.append(
          text.substr(at, (close == std::string_view::npos ? end : end + kClose.size()) - at));
      at = close == std::string_view::npos ? text.size() : close + kClose.size();
      continue;
    }
    content.append(text.substr(at, open - at));
    if (out.calls.size() < max_calls) {
      out.calls.push_back({call["name"].get<std::string>(),
                           call.value("arguments", nlohmann::json::object()).dump()});
    }
    at = close == std::string_view::npos ? text.size() : close + kClose.size();
  }
  if (at < text.size()) content.append(text.substr(at));
  out.content = std::string(Trim(content));
  return out;
}

bool TemplateUsesHermesToolCalls(std::string_view template_source) {
  return template_source.find(kOpen) != std::string_view::npos;
}

Result<Grammar> HermesToolCallGrammar(
    const std::vector<std::pair<std::string, nlohmann::ordered_json>>& functions) {
  std::vector<Grammar::Framed> frames;
  for (size_t i = 0; i < functions.size(); ++i) {
    const auto& [name, parameters] = functions[i];
    Grammar::Framed frame;
    frame.before =
        std::string(kOpen) + "\n{\"name\": " + nlohmann::json(name).dump() + ", \"arguments\": ";
    frame.schema = parameters.is_null() ? nlohmann::ordered_json{{"type", "object"}} : parameters;
    frame.after = "}\n" + std::string(kClose);
    frame.where = "the parameters of " + name;
    frames.push_back(std::move(frame));
  }
  return Grammar::OneOfFramed(frames);
}

}  // namespace sy
