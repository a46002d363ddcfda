#include "launcher/serving/openai_request.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <span>
#include <string_view>
#include <utility>

#include "storage/formats/text_file.h"

namespace sy::serving {
namespace {

using json = nlohmann::json;

std::string TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::binary:
    case json::value_t::discarded:
      break;
  }
  return "a value";
}

Status WrongType(std::string_view field, std::string_view want, const json& got) {
  return InvalidArgumentError("'" + std::string(field) + "' must be " + std::string(want) +
                              ", not " + TypeName(got));
}

// The body as a JSON object, or why not: storage's strict parser (no duplicate keys, no deep
// nesting), with its advice about files cut off.
Result<json> ParseObject(std::string_view body) {
  if (body.size() > kMaxBodyBytes) {
    return InvalidArgumentError("the request body is " + std::to_string(body.size()) +
                                " bytes; the limit is " + std::to_string(kMaxBodyBytes));
  }
  Result<json> root = storage::ParseStrictJson(body, "request", "the body");
  if (!root.ok()) {
    std::string message(root.status().message());
    message = message.substr(0, message.find("; the file"));
    return InvalidArgumentError(message);
  }
  if (!root->is_object()) return InvalidArgumentError("the request body must be a JSON object");
  return std::move(root).value();
}

// The field, or null when absent (the API treats an explicit null as absent).
const json* Field(const json& root, std::string_view name) {
  auto it = root.find(name);
  if (it == root.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<bool> GetBool(const json& root, std::string_view name, bool fallback) {
  const json* v = Field(root, name);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return WrongType(name, "true or false", *v);
  return v->get<bool>();
}

// An integer within [lo, hi].
Result<std::optional<int64_t>> GetInt(const json& root, std::string_view name, int64_t lo,
                                      int64_t hi) {
  const json* v = Field(root, name);
  if (v == nullptr) return std::optional<int64_t>();
  if (!v->is_number_integer()) return WrongType(name, "an integer", *v);
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgumentError("'" + std::string(name) + "' is out of range [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  const auto value = v->get<int64_t>();
  if (value < lo || value > hi) {
    return InvalidArgumentError("'" + std::string(name) + "' is " + std::to_string(value) +
                                "; it must be in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
  }
  return std::optional<int64_t>(value);
}

// A number within [lo, hi] (lo excluded when `open_low`).
Result<std::optional<double>> GetNumber(const json& root, std::string_view name, double lo,
                                        double hi, bool open_low = false) {
  const json* v = Field(root, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return WrongType(name, "a number", *v);
  const auto value = v->get<double>();
  if (!std::isfinite(value) || value > hi || value < lo || (open_low && value == lo)) {
    return InvalidArgumentError("'" + std::string(name) + "' is " + v->dump() + "; it must be in " +
                                (open_low ? "(" : "[") + json(lo).dump() + ", " + json(hi).dump() +
                                "]");
  }
  return std::optional<double>(value);
}

// A token id: an integer in [0, 2^31).
Result<int32_t> TokenId(const json& v, std::string_view field) {
  if (!v.is_number_integer()) return WrongType(field, "an array of token ids (integers)", v);
  if (v.is_number_unsigned() ? v.get<uint64_t>() > INT32_MAX
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)) {
    return InvalidArgumentError("'" + std::string(field) + "' holds " + v.dump() +
                                ", not a token id (an integer in [0, 2^31))");
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

// Every field a request may carry: those this server implements, those it refuses unless they
// hold their neutral value (below), and `user` (an end-user id, which changes nothing). Any other
// field (repetition_penalty, min_p, typical_p, mirostat, guided_json, ...) is refused: a field
// that would be ignored is an answer the client did not ask for.
// clang-format off
constexpr std::string_view kCommonFields[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
    "seed", "stream", "stream_options",
    "stop", "stop_token_ids", "ignore_eos", "user", "n", "best_of", "echo", "logprobs",
    "top_logprobs", "presence_penalty", "frequency_penalty", "suffix", "logit_bias", "tools",
    "functions", "response_format", "tool_choice", "parallel_tool_calls"};
// clang-format on
constexpr std::string_view kChatFields[] = {"messages", "max_completion_tokens",
                                            "chat_template_kwargs"};
constexpr std::string_view kCompletionFields[] = {"prompt"};

constexpr std::string_view kTokenizeFields[] = {
    "model", "prompt", "messages", "add_generation_prompt", "chat_template_kwargs", "tools"};
constexpr std::string_view kDetokenizeFields[] = {"model", "tokens"};

// A field outside `allowed` and `more` is refused by name.
Status RefuseUnknownFields(const json& root, std::span<const std::string_view> allowed,
                           std::span<const std::string_view> more = {}) {
  for (const auto& [name, value] : root.items()) {
    bool known = false;
    for (std::string_view f : allowed) known = known || name == f;
    for (std::string_view f : more) known = known || name == f;
    if (!known) {
      return InvalidArgumentError("the field " + storage::Quote(name) +
                                  " is not supported by this server (docs/serving.md lists the "
                                  "fields it takes)");
    }
  }
  return Status::Ok();
}

// Fields this server does not implement: refused unless they have their neutral value.
Status RefuseUnsupported(const json& root, bool chat) {
  auto neutral = [&](std::string_view name, const json& ok_value) -> Status {
    const json* v = Field(root, name);
    if (v == nullptr || *v == ok_value) return Status::Ok();
    return InvalidArgumentError("'" + std::string(name) + "' = " + v->dump() +
                                " is not supported by this server (only " + ok_value.dump() + ")");
  };
  SY_RETURN_IF_ERROR(neutral("best_of", 1));
  SY_RETURN_IF_ERROR(neutral("echo", false));
  SY_RETURN_IF_ERROR(neutral("suffix", ""));
  if (!chat) {  // tools are a chat's
    SY_RETURN_IF_ERROR(neutral("tools", json::array()));
    SY_RETURN_IF_ERROR(neutral("tool_choice", json("none")));
  }
  SY_RETURN_IF_ERROR(neutral("functions", json::array()));
  return Status::Ok();
}

// Object members in `v`, counted to a limit (`limit` + 1 once past it).
size_t CountMembers(const json& v, size_t limit) {
  size_t n = 0;
  if (v.is_object()) n += v.size();
  if (v.is_object() || v.is_array()) {
    for (const json& child : v) {
      if (n > limit) break;
      n += CountMembers(child, limit - std::min(n, limit));
    }
  }
  return n;
}

// The body's top-level member `name`, read again as an ordered_json (its objects keep the order
// the body gives their members). The caller bounds its size first: an ordered_json object finds a
// key by walking its members.
Result<nlohmann::ordered_json> InBodyOrder(std::string_view body, std::string_view name) {
  using ordered = nlohmann::ordered_json;
  const ordered::parser_callback_t only_it = [name](int depth, ordered::parse_event_t event,
                                                    ordered& parsed) {
    return depth != 1 || event != ordered::parse_event_t::key || parsed == name;
  };
  ordered again = ordered::parse(body, only_it, /*allow_exceptions=*/false);
  if (!again.is_object() || !again.contains(name)) {
    return InternalError("the body did not parse again");
  }
  return std::move(again.at(name));
}

// response_format (Grammar::ForResponseFormat reads it). Its schema's properties keep the order the
// body gives them: the member is read again as an ordered_json, whose objects find keys by walking
// their members, so its size is bounded first.
Result<std::shared_ptr<const Grammar>> ResponseFormat(const json& root, std::string_view body) {
  const json* f = Field(root, "response_format");
  if (f == nullptr) return std::shared_ptr<const Grammar>();
  if (CountMembers(*f, kMaxSchemaMembers) > kMaxSchemaMembers) {
    return InvalidArgumentError("'response_format' holds more than " +
                                std::to_string(kMaxSchemaMembers) + " names; the limit is " +
                                std::to_string(kMaxSchemaMembers));
  }
  SY_ASSIGN_OR_RETURN(const nlohmann::ordered_json format, InBodyOrder(body, "response_format"));
  return Grammar::ForResponseFormat(format);
}

Result<SamplingParams> ParseSampling(const json& root, bool chat, std::string_view body) {
  SY_RETURN_IF_ERROR(
      RefuseUnknownFields(root, kCommonFields,
                          chat ? std::span<const std::string_view>(kChatFields)
                               : std::span<const std::string_view>(kCompletionFields)));
  SY_RETURN_IF_ERROR(RefuseUnsupported(root, chat));
  SamplingParams p;
  SY_ASSIGN_OR_RETURN(p.grammar, ResponseFormat(root, body));
  SY_ASSIGN_OR_RETURN(p.stream, GetBool(root, "stream", false));
  if (const json* o = Field(root, "stream_options")) {
    if (!o->is_object()) return WrongType("stream_options", "an object", *o);
    SY_ASSIGN_OR_RETURN(p.include_usage, GetBool(*o, "include_usage", false));
  }
  SY_ASSIGN_OR_RETURN(p.max_tokens, GetInt(root, "max_tokens", 1, kMaxTokensLimit));
  if (chat && !p.max_tokens.has_value()) {
    SY_ASSIGN_OR_RETURN(p.max_tokens, GetInt(root, "max_completion_tokens", 1, kMaxTokensLimit));
  }
  SY_ASSIGN_OR_RETURN(std::optional<double> temperature, GetNumber(root, "temperature", 0, 2));
  if (temperature) p.temperature = static_cast<float>(*temperature);
  SY_ASSIGN_OR_RETURN(std::optional<double> top_p, GetNumber(root, "top_p", 0, 1, true));
  if (top_p) {
    p.top_p = static_cast<float>(*top_p);
    if (!(p.top_p > 0)) {  // a positive value below f32's range
      return InvalidArgumentError("'top_p' is " + json(*top_p).dump() +
                                  ", which is 0 in single precision; it must be in (0, 1] and at "
                                  "least " +
                                  json(std::numeric_limits<float>::denorm_min()).dump());
    }
  }
  // logprobs: a count of alternatives in a completion; a boolean in a chat, with top_logprobs.
  if (chat) {
    SY_ASSIGN_OR_RETURN(const bool logprobs, GetBool(root, "logprobs", false));
    SY_ASSIGN_OR_RETURN(std::optional<int64_t> top,
                        GetInt(root, "top_logprobs", 0, kMaxTopLogprobs));
    if (top && !logprobs) {
      return InvalidArgumentError("'top_logprobs' needs 'logprobs': true");
    }
    if (logprobs) p.logprobs = static_cast<int32_t>(top.value_or(0));
  } else if (const json* v = Field(root, "logprobs"); v != nullptr && *v != false) {
    SY_ASSIGN_OR_RETURN(std::optional<int64_t> top, GetInt(root, "logprobs", 0, kMaxTopLogprobs));
    p.logprobs = static_cast<int32_t>(*top);
    if (Field(root, "top_logprobs") != nullptr) {
      return InvalidArgumentError(
          "'top_logprobs' is a chat field; a completion gives the count "
          "in 'logprobs'");
    }
  }
  if (const json* bias = Field(root, "logit_bias")) {
    if (!bias->is_object()) return WrongType("logit_bias", "an object of token id: bias", *bias);
    if (bias->size() > kMaxLogitBias) {
      return InvalidArgumentError("'logit_bias' holds " + std::to_string(bias->size()) +
                                  " tokens; at most " + std::to_string(kMaxLogitBias));
    }
    for (const auto& [key, value] : bias->items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX) {
        return InvalidArgumentError("'logit_bias' key " + storage::Quote(key) +
                                    " is not a token id (an integer in [0, 2^31))");
      }
      if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100)) {
        return InvalidArgumentError("'logit_bias' of token " + key +
                                    " must be a number in [-100, 100], not " + value.dump());
      }
      p.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
    }
  }
  SY_ASSIGN_OR_RETURN(std::optional<int64_t> n, GetInt(root, "n", 1, kMaxChoices));
  if (n) p.n = static_cast<int32_t>(*n);
  SY_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, GetInt(root, "top_k", -1, INT32_MAX));
  if (top_k) p.top_k = static_cast<int32_t>(std::max<int64_t>(0, *top_k));
  SY_ASSIGN_OR_RETURN(std::optional<double> min_p, GetNumber(root, "min_p", 0, 1));
  if (min_p) p.min_p = static_cast<float>(*min_p);
  SY_ASSIGN_OR_RETURN(std::optional<double> repetition,
                      GetNumber(root, "repetition_penalty", 0, 10, /*open_low=*/true));
  if (repetition) p.repetition_penalty = static_cast<float>(*repetition);
  SY_ASSIGN_OR_RETURN(std::optional<double> presence, GetNumber(root, "presence_penalty", -2, 2));
  if (presence) p.presence_penalty = static_cast<float>(*presence);
  SY_ASSIGN_OR_RETURN(std::optional<double> frequency, GetNumber(root, "frequency_penalty", -2, 2));
  if (frequency) p.frequency_penalty = static_cast<float>(*frequency);
  SY_ASSIGN_OR_RETURN(std::optional<int64_t> seed, GetInt(root, "seed", INT64_MIN, INT64_MAX));
  if (seed) p.seed = static_cast<uint64_t>(*seed);
  SY_ASSIGN_OR_RETURN(p.ignore_eos, GetBool(root, "ignore_eos", false));
  if (const json* stop = Field(root, "stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings) {
        return InvalidArgumentError("'stop' has " + std::to_string(stop->size()) +
                                    " strings; at most " + std::to_string(kMaxStopStrings));
      }
      for (const json& s : *stop) {
        if (!s.is_string()) return WrongType("stop", "a string or an array of strings", s);
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or an array of strings", *stop);
    }
    for (const std::string& s : p.stop) {
      if (s.empty() || s.size() > kMaxStopBytes) {
        return InvalidArgumentError("a 'stop' string must have 1 to " +
                                    std::to_string(kMaxStopBytes) + " bytes, not " +
                                    std::to_string(s.size()));
      }
    }
  }
  if (const json* ids = Field(root, "stop_token_ids")) {
    if (!ids->is_array()) return WrongType("stop_token_ids", "an array of token ids", *ids);
    if (ids->size() > kMaxStopTokenIds) {
      return InvalidArgumentError("'stop_token_ids' has more than " +
                                  std::to_string(kMaxStopTokenIds) + " ids");
    }
    for (const json& id : *ids) {
      SY_ASSIGN_OR_RETURN(int32_t token, TokenId(id, "stop_token_ids"));
      p.stop_token_ids.push_back(token);
    }
  }
  return p;
}

Result<std::string> GetModel(const json& root) {
  const json* m = Field(root, "model");
  if (m == nullptr) return std::string();
  if (!m->is_string()) return WrongType("model", "a string", *m);
  return m->get<std::string>();
}

// A prompt that is an array: token ids, or a one-element batch of a string or of ids.
Status ParseArrayPrompt(const json& prompt, CompletionRequest& out) {
  if (prompt.empty()) return InvalidArgumentError("'prompt' is an empty array");
  if (prompt[0].is_string() || prompt[0].is_array()) {
    if (prompt.size() != 1) {
      return InvalidArgumentError("'prompt' holds " + std::to_string(prompt.size()) +
                                  " prompts; this server takes one prompt per request");
    }
    const json& only = prompt[0];
    if (only.is_string()) {
      out.prompt_text = only.get<std::string>();
      return Status::Ok();
    }
    return ParseArrayPrompt(only, out);
  }
  out.prompt_ids.reserve(prompt.size());
  for (const json& id : prompt) {
    SY_ASSIGN_OR_RETURN(int32_t token, TokenId(id, "prompt"));
    out.prompt_ids.push_back(token);
  }
  return Status::Ok();
}

Result<std::string> MessageContent(const json& content, size_t index) {
  const std::string field = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return WrongType(field, "a string or an array of text parts", content);
  std::string text;
  for (const json& part : content) {
    if (!part.is_object()) return WrongType(field, "an array of text parts (objects)", part);
    const json* type = Field(part, "type");
    if (type == nullptr || !type->is_string() || *type != "text") {
      return InvalidArgumentError(field +
                                  " has a part that is not {\"type\": \"text\", ...}; this "
                                  "server takes text only");
    }
    const json* t = Field(part, "text");
    if (t == nullptr || !t->is_string()) {
      return InvalidArgumentError(field + " has a text part without a \"text\" string");
    }
    text += t->get<std::string>();
  }
  return text;
}

// chat_template_kwargs: an object (its values any JSON), or null when absent.
Result<json> TemplateKwargs(const json& root) {
  const json* v = Field(root, "chat_template_kwargs");
  if (v == nullptr) return json();
  if (!v->is_object()) return WrongType("chat_template_kwargs", "an object", *v);
  return *v;
}

// tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}],
// in the body's order (the template prints them).
Result<nlohmann::ordered_json> ParseTools(const json& root, std::string_view body) {
  const json* tools = Field(root, "tools");
  if (tools == nullptr) return nlohmann::ordered_json();
  if (!tools->is_array()) return WrongType("tools", "an array of functions", *tools);
  if (tools->empty()) return nlohmann::ordered_json();
  if (tools->size() > kMaxTools) {
    return InvalidArgumentError("'tools' holds " + std::to_string(tools->size()) +
                                " functions; at most " + std::to_string(kMaxTools));
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", json()) != "function" || !t.contains("function") ||
        !t["function"].is_object()) {
      return InvalidArgumentError(at + " must be {\"type\": \"function\", \"function\": {...}}");
    }
    for (const auto& [key, value] : t.items()) {
      if (key != "type" && key != "function") {
        return InvalidArgumentError(at + "." + key + " is not supported (type, function)");
      }
    }
    const json& f = t["function"];
    for (const auto& [key, value] : f.items()) {
      if (key != "name" && key != "description" && key != "parameters" && key != "strict") {
        return InvalidArgumentError(at + ".function." + key +
                                    " is not supported (name, description, parameters, strict)");
      }
    }
    const json* name = Field(f, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty() ||
        name->get<std::string>().size() > 64 ||
        name->get<std::string>().find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            std::string::npos) {
      return InvalidArgumentError(at + ".function.name must be 1 to 64 letters, digits, _ or -");
    }
    if (const json* d = Field(f, "description"); d != nullptr && !d->is_string()) {
      return WrongType(at + ".function.description", "a string", *d);
    }
    if (const json* p = Field(f, "parameters"); p != nullptr && !p->is_object()) {
      return WrongType(at + ".function.parameters", "a JSON Schema object", *p);
    }
  }
  if (CountMembers(*tools, kMaxSchemaMembers) > kMaxSchemaMembers) {
    return InvalidArgumentError("'tools' holds more than " + std::to_string(kMaxSchemaMembers) +
                                " names; the limit is " + std::to_string(kMaxSchemaMembers));
  }
  return InBodyOrder(body, "tools");
}

// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": N}} with N
// one of the tools; without it, auto when there are tools.
Result<ToolChoice> ParseToolChoice(const json& root, const nlohmann::ordered_json& tools) {
  ToolChoice choice;
  choice.kind = tools.is_null() ? ToolChoice::kNone : ToolChoice::kAuto;
  const json* c = Field(root, "tool_choice");
  if (c == nullptr) return choice;
  if (c->is_string()) {
    const std::string kind = c->get<std::string>();
    if (kind == "none") {
      choice.kind = ToolChoice::kNone;
    } else if (kind == "auto") {
      choice.kind = tools.is_null() ? ToolChoice::kNone : ToolChoice::kAuto;
    } else if (kind == "required") {
      choice.kind = ToolChoice::kRequired;
    } else {
      return InvalidArgumentError("'tool_choice' = \"" + kind +
                                  "\" is not one of none, auto, required");
    }
  } else if (c->is_object() && c->value("type", json()) == "function" && c->contains("function") &&
             (*c)["function"].is_object() && (*c)["function"].contains("name") &&
             (*c)["function"]["name"].is_string()) {
    choice.kind = ToolChoice::kNamed;
    choice.name = (*c)["function"]["name"].get<std::string>();
  } else {
    return InvalidArgumentError("'tool_choice' = " + c->dump() +
                                " must be none, auto, required or {\"type\": \"function\", "
                                "\"function\": {\"name\": ...}}");
  }
  if (choice.kind != ToolChoice::kNone && choice.kind != ToolChoice::kAuto && tools.is_null()) {
    return InvalidArgumentError("'tool_choice' asks for a tool call, and 'tools' is empty");
  }
  if (choice.kind == ToolChoice::kNamed) {
    bool found = false;
    for (const auto& t : tools) found = found || t["function"]["name"] == choice.name;
    if (!found) {
      return InvalidArgumentError("'tool_choice' names the function \"" + choice.name +
                                  "\", which 'tools' does not hold");
    }
  }
  return choice;
}

// A message's fields besides role and content: an assistant's tool_calls, a tool message's
// tool_call_id, a name. Any other field that is not null is refused.
Result<nlohmann::ordered_json> MessageFields(const json& m, const std::string& at,
                                             const std::string& role) {
  nlohmann::ordered_json fields;
  for (const auto& [key, value] : m.items()) {
    if (key == "role" || key == "content" || value.is_null()) continue;
    if (key == "name") {
      if (!value.is_string()) return WrongType(at + ".name", "a string", value);
      fields["name"] = value.get<std::string>();
    } else if (key == "tool_call_id" && role == "tool") {
      if (!value.is_string()) return WrongType(at + ".tool_call_id", "a string", value);
      fields["tool_call_id"] = value.get<std::string>();
    } else if (key == "tool_calls" && role == "assistant") {
      if (!value.is_array() || value.size() > kMaxTools) {
        return WrongType(at + ".tool_calls", "an array of at most 128 calls", value);
      }
      nlohmann::ordered_json calls = nlohmann::ordered_json::array();
      for (size_t i = 0; i < value.size(); ++i) {
        const json& call = value[i];
        const std::string where = at + ".tool_calls[" + std::to_string(i) + "]";
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
            !call["function"].contains("name") || !call["function"]["name"].is_string() ||
            !call["function"].contains("arguments") || !call["function"]["arguments"].is_string()) {
          return InvalidArgumentError(where +
                                      " must be {\"id\", \"type\": \"function\", \"function\": "
                                      "{\"name\", \"arguments\" (a JSON text)}}");
        }
        nlohmann::ordered_json out = nlohmann::ordered_json::object();
        if (call.contains("id") && call["id"].is_string()) out["id"] = call["id"];
        out["type"] = "function";
        out["function"] = {{"name", call["function"]["name"].get<std::string>()},
                           {"arguments", call["function"]["arguments"].get<std::string>()}};
        calls.push_back(std::move(out));
      }
      fields["tool_calls"] = std::move(calls);
    } else {
      return InvalidArgumentError(at + "." + key + " is not supported in a " + role + " message");
    }
  }
  return fields;
}

// The 'messages' of a chat (or of a chat to tokenize).
Result<std::vector<ChatMessage>> ParseMessages(const json& root) {
  std::vector<ChatMessage> out;
  const json* messages = Field(root, "messages");
  if (messages == nullptr) return InvalidArgumentError("'messages' is required");
  if (!messages->is_array()) return WrongType("messages", "an array of messages", *messages);
  if (messages->empty() || messages->size() > kMaxMessages) {
    return InvalidArgumentError("'messages' must hold 1 to " + std::to_string(kMaxMessages) +
                                " messages, not " + std::to_string(messages->size()));
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return WrongType(at, "an object", m);
    const json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidArgumentError(at + " needs a \"role\" string");
    }
    ChatMessage message;
    message.role = role->get<std::string>();
    if (message.role != "system" && message.role != "user" && message.role != "assistant" &&
        message.role != "tool" && message.role != "developer") {
      return InvalidArgumentError(at + ".role is '" + message.role +
                                  "'; one of system, user, assistant, tool, developer");
    }
    if (const json* content = Field(m, "content")) {
      SY_ASSIGN_OR_RETURN(message.content, MessageContent(*content, i));
    } else if (message.role != "assistant") {
      return InvalidArgumentError(at + " needs a \"content\"");
    }
    SY_ASSIGN_OR_RETURN(message.fields, MessageFields(m, at, message.role));
    out.push_back(std::move(message));
  }
  return out;
}

}  // namespace

Result<CompletionRequest> ParseCompletionRequest(std::string_view body) {
  SY_ASSIGN_OR_RETURN(json root, ParseObject(body));
  CompletionRequest out;
  SY_ASSIGN_OR_RETURN(out.model, GetModel(root));
  const json* prompt = Field(root, "prompt");
  if (prompt == nullptr) return InvalidArgumentError("'prompt' is required");
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    SY_RETURN_IF_ERROR(ParseArrayPrompt(*prompt, out));
  } else {
    return WrongType("prompt", "a string or an array of token ids", *prompt);
  }
  SY_ASSIGN_OR_RETURN(out.params, ParseSampling(root, /*chat=*/false, body));
  return out;
}

Result<ChatRequest> ParseChatRequest(std::string_view body) {
  SY_ASSIGN_OR_RETURN(json root, ParseObject(body));
  ChatRequest out;
  SY_ASSIGN_OR_RETURN(out.model, GetModel(root));
  SY_ASSIGN_OR_RETURN(out.messages, ParseMessages(root));
  SY_ASSIGN_OR_RETURN(out.chat_template_kwargs, TemplateKwargs(root));
  SY_ASSIGN_OR_RETURN(out.params, ParseSampling(root, /*chat=*/true, body));
  SY_ASSIGN_OR_RETURN(out.tools, ParseTools(root, body));
  SY_ASSIGN_OR_RETURN(out.tool_choice, ParseToolChoice(root, out.tools));
  SY_ASSIGN_OR_RETURN(out.parallel_tool_calls, GetBool(root, "parallel_tool_calls", true));
  return out;
}

Result<TokenizeRequest> ParseTokenizeRequest(std::string_view body) {
  SY_ASSIGN_OR_RETURN(json root, ParseObject(body));
  SY_RETURN_IF_ERROR(RefuseUnknownFields(root, kTokenizeFields));
  TokenizeRequest out;
  SY_ASSIGN_OR_RETURN(out.model, GetModel(root));
  const json* prompt = Field(root, "prompt");
  const bool chat = Field(root, "messages") != nullptr;
  if ((prompt == nullptr) == !chat) {
    return InvalidArgumentError("give either 'prompt' (a text) or 'messages' (a chat)");
  }
  if (chat) {
    SY_ASSIGN_OR_RETURN(out.messages, ParseMessages(root));
    SY_ASSIGN_OR_RETURN(out.add_generation_prompt, GetBool(root, "add_generation_prompt", true));
    SY_ASSIGN_OR_RETURN(out.chat_template_kwargs, TemplateKwargs(root));
    SY_ASSIGN_OR_RETURN(out.tools, ParseTools(root, body));
  } else {
    if (!prompt->is_string()) return WrongType("prompt", "a string", *prompt);
    out.prompt = prompt->get<std::string>();
  }
  return out;
}

Result<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body) {
  SY_ASSIGN_OR_RETURN(json root, ParseObject(body));
  SY_RETURN_IF_ERROR(RefuseUnknownFields(root, kDetokenizeFields));
  DetokenizeRequest out;
  SY_ASSIGN_OR_RETURN(out.model, GetModel(root));
  const json* tokens = Field(root, "tokens");
  if (tokens == nullptr) return InvalidArgumentError("'tokens' is required");
  if (!tokens->is_array()) return WrongType("tokens", "an array of token ids", *tokens);
  out.tokens.reserve(tokens->size());
  for (const json& id : *tokens) {
    SY_ASSIGN_OR_RETURN(int32_t token, TokenId(id, "tokens"));
    out.tokens.push_back(token);
  }
  return out;
}

}  // namespace sy::serving
