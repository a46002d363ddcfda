#include "runtime/config/config.h"

#include <algorithm>
#include <set>
#include <utility>

#include "runtime/config/edit_distance.h"
#include "runtime/core/read_file.h"

namespace sy {
namespace {

using nlohmann::json;

// Deeper documents are rejected: configs are a few levels deep, and the JSON library's dump and
// comparison recurse, so an adversarial depth would overflow the stack.
constexpr int kMaxDepth = 64;

std::string JoinKey(const std::vector<std::string>& parts, size_t count) {
  std::string key;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) key += '.';
    key += parts[i];
  }
  return key;
}

// 1-based line and column of byte offset `byte` (as nlohmann reports it: the count of bytes read,
// so the offending byte is at index byte - 1).
std::pair<size_t, size_t> LineColumn(std::string_view text, size_t byte) {
  const size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// The library's own explanation, without its "[json.exception...] parse error at ...: " prefix.
std::string ParseErrorDetail(const std::string& what) {
  const size_t column = what.find("column ");
  size_t start = column == std::string::npos ? what.find("] ") : what.find(": ", column);
  if (start == std::string::npos) return what;
  start += 2;
  return what.substr(start);
}

// Levels of containers in `value`: 0 for a scalar, 1 for [] or {}, 2 for {"a": []}, ...
int ContainerLevels(const json& value) {
  if (!value.is_structured()) return 0;
  int deepest = 0;
  for (const json& child : value) deepest = std::max(deepest, ContainerLevels(child));
  return 1 + deepest;
}

}  // namespace

std::vector<std::string> SplitDottedKey(std::string_view dotted_key) {
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    const size_t dot = dotted_key.find('.', begin);
    if (dot == std::string_view::npos) {
      parts.emplace_back(dotted_key.substr(begin));
      return parts;
    }
    parts.emplace_back(dotted_key.substr(begin, dot - begin));
    begin = dot + 1;
  }
}

std::string DescribeJsonValue(const json& value) {
  constexpr size_t kMaxChars = 60;
  auto clip = [](std::string text) {
    if (text.size() > kMaxChars) text = text.substr(0, kMaxChars - 3) + "...";
    return text;
  };
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return std::string("boolean ") + (value.get<bool>() ? "true" : "false");
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer " + value.dump();
    case json::value_t::number_float:
      return "number " + value.dump();
    case json::value_t::string:
      return "string " + clip(value.dump(-1, ' ', false, json::error_handler_t::replace));
    case json::value_t::array:
      return "array " + clip(value.dump(-1, ' ', false, json::error_handler_t::replace));
    case json::value_t::object:
      return "object " + clip(value.dump(-1, ' ', false, json::error_handler_t::replace));
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      return "a discarded value";
  }
  return "a value";
}

namespace {

// Parses any JSON value, rejecting duplicate keys and excessive depth.
Result<json> ParseJsonText(std::string_view text, const std::string& source) {
  // Frames of the containers being parsed: the keys seen in each object (for duplicates) and the
  // current key (for naming the duplicate).
  struct Frame {
    bool is_object = false;
    std::set<std::string> keys;
    std::string current_key;
  };
  std::vector<Frame> frames;
  std::string duplicate;
  bool too_deep = false;

  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxDepth) {
          too_deep = true;
          return false;
        }
        frames.push_back(Frame{event == json::parse_event_t::object_start, {}, {}});
        return true;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        return true;
      case json::parse_event_t::key: {
        if (frames.empty()) return true;
        Frame& frame = frames.back();
        std::string name = parsed.get<std::string>();
        if (!frame.keys.insert(name).second && duplicate.empty()) {
          std::vector<std::string> path;
          for (const Frame& f : frames) {
            if (&f == &frame) break;
            path.push_back(f.is_object ? f.current_key : "[]");
          }
          path.push_back(name);
          duplicate = JoinKey(path, path.size());
        }
        frame.current_key = std::move(name);
        return true;
      }
      case json::parse_event_t::value:
        return true;
    }
    return true;
  };

  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    const auto [line, column] = LineColumn(text, e.byte);
    return InvalidArgumentError("config " + source + ": malformed JSON at line " +
                                std::to_string(line) + ", column " + std::to_string(column) + ": " +
                                ParseErrorDetail(e.what()));
  } catch (const json::exception& e) {
    // Number overflow ("1e999") is an out_of_range error with no position.
    return InvalidArgumentError("config " + source +
                                ": malformed JSON: " + ParseErrorDetail(e.what()));
  }
  if (too_deep) {
    return InvalidArgumentError("config " + source + ": nesting deeper than " +
                                std::to_string(kMaxDepth) +
                                " levels; a config is an object of blocks a few levels deep");
  }
  if (!duplicate.empty()) {
    return InvalidArgumentError("config " + source + ": key '" + duplicate +
                                "' appears more than once; keep one");
  }
  return root;
}

}  // namespace

Result<Config> Config::Load(const std::string& path) {
  Result<std::string> contents = ReadFile(path);
  if (contents.status().code() == StatusCode::kNotFound) {
    return NotFoundError("config " + path +
                         ": file not found; check the path (relative paths are resolved from "
                         "the current directory)");
  }
  if (!contents.ok()) return contents.status().WithContext("config");
  return Parse(*contents, path);
}

Result<Config> Config::Parse(std::string_view text, std::string source) {
  SY_ASSIGN_OR_RETURN(json root, ParseJsonText(text, source));
  if (!root.is_object()) {
    return InvalidArgumentError("config " + source +
                                ": the top level must be a JSON object of blocks, e.g. "
                                "{\"train\": {\"steps\": 100}}; got " +
                                DescribeJsonValue(root));
  }
  return Config(std::move(source), std::move(root));
}

Status Config::ApplyOverride(std::string_view assignment) {
  const std::string shown(assignment);
  const size_t equals = assignment.find('=');
  if (equals == std::string_view::npos) {
    return InvalidArgumentError("config " + source_ + ": --set '" + shown +
                                "' is malformed: expected key=value, e.g. --set train.steps=100");
  }
  const std::string_view key = assignment.substr(0, equals);
  const std::string_view raw_value = assignment.substr(equals + 1);
  const std::vector<std::string> parts = SplitDottedKey(key);
  for (const std::string& part : parts) {
    if (part.empty()) {
      return InvalidArgumentError("config " + source_ + ": --set '" + shown +
                                  "' is malformed: the key must be dotted names like "
                                  "train.steps, with no empty part");
    }
  }

  try {
    (void)json(std::string(assignment)).dump();
  } catch (const json::type_error&) {
    return InvalidArgumentError(
        "config " + source_ + ": --set " +
        json(std::string(assignment)).dump(-1, ' ', false, json::error_handler_t::replace) +
        " is not valid UTF-8");
  }

  // JSON when it parses, else the raw text as a string.
  json value;
  Result<json> parsed = ParseJsonText(raw_value, "<--set>");
  if (parsed.ok()) {
    value = std::move(parsed).value();
  } else {
    value = std::string(raw_value);
  }

  // The blocks the key walks through (the top one included) and the value's own containers must
  // stay within the depth Parse accepts, or the effective config (which a checkpoint keeps)
  // would not parse back.
  const size_t levels = parts.size() + static_cast<size_t>(ContainerLevels(value));
  if (levels > static_cast<size_t>(kMaxDepth)) {
    return InvalidArgumentError("config " + source_ + ": --set '" + std::string(key) +
                                "=...' nests " + std::to_string(levels) +
                                " levels deep (the key's parts and the value's own blocks), more "
                                "than " +
                                std::to_string(kMaxDepth) +
                                "; a config is an object of blocks a few levels deep");
  }

  json* node = &root_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    json& child = (*node)[parts[i]];
    if (child.is_null()) child = json::object();
    if (!child.is_object()) {
      return InvalidArgumentError("config " + source_ + ": --set " + shown + ": '" +
                                  JoinKey(parts, i + 1) + "' is " + DescribeJsonValue(child) +
                                  ", not a block of keys, so it has no key '" + parts[i + 1] + "'");
    }
    node = &child;
  }
  (*node)[parts.back()] = std::move(value);
  overrides_.push_back(Override{std::string(key), std::string(raw_value), shown});
  return Status::Ok();
}

Status Config::ApplyOverrides(std::span<const std::string> assignments) {
  for (const std::string& assignment : assignments) SY_RETURN_IF_ERROR(ApplyOverride(assignment));
  return Status::Ok();
}

const json* Config::Find(std::string_view dotted_key) const {
  const json* node = &root_;
  for (const std::string& part : SplitDottedKey(dotted_key)) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

const Config::Override* Config::FindOverride(std::string_view dotted_key) const {
  // True when `inner` is `outer` or a key inside the block `outer`.
  auto within = [](std::string_view inner, std::string_view outer) {
    return inner.size() >= outer.size() && inner.substr(0, outer.size()) == outer &&
           (inner.size() == outer.size() || inner[outer.size()] == '.');
  };
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (within(dotted_key, it->key) || within(it->key, dotted_key)) return &*it;
  }
  return nullptr;
}

std::string Config::Where(std::string_view dotted_key) const {
  std::string where = "config " + source_;
  if (const Override* o = FindOverride(dotted_key)) where += ": --set " + o->assignment;
  return where;
}

Status Config::CheckKnownBlocks(std::span<const std::string_view> known) const {
  std::vector<std::string> candidates(known.begin(), known.end());
  for (const auto& [name, value] : root_.items()) {
    bool found = false;
    for (std::string_view k : known) found = found || k == name;
    if (found) continue;
    std::string message = Where(name) + ": unknown block '" + name + "'";
    if (auto nearest = NearestMatch(name, candidates)) {
      message += "; did you mean '" + *nearest + "'?";
    } else {
      message += "; this command reads the blocks:";
      for (size_t i = 0; i < candidates.size(); ++i) {
        message += (i == 0 ? " " : ", ") + candidates[i];
      }
    }
    return InvalidArgumentError(std::move(message));
  }
  return Status::Ok();
}

void Config::RecordEffective(std::string_view block, json value) {
  effective_[std::string(block)] = std::move(value);
}

json Config::Effective() const {
  json result = root_;
  for (const auto& [block, value] : effective_.items()) {
    const std::vector<std::string> parts = SplitDottedKey(block);
    json* node = &result;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      json& child = (*node)[parts[i]];
      if (!child.is_object()) child = json::object();
      node = &child;
    }
    (*node)[parts.back()] = value;
  }
  return result;
}

std::string Config::DumpEffective(int indent) const {
  return Effective().dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace sy
