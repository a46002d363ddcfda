#include "storage/formats/text_file.h"

#include <set>
#include <vector>

namespace sy::storage {

using nlohmann::json;

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = "\"";
  for (char c : s.substr(0, kMax)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += '?';
    } else {
      out += c;
    }
  }
  if (s.size() > kMax) out += "...";
  out += '"';
  return out;
}

Result<json> ParseStrictJson(std::string_view text, std::string_view file, std::string_view what) {
  std::vector<std::set<std::string>> keys;  // one key set per open object
  std::string duplicate;
  bool too_deep = false;
  int depth = 0;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        [[fallthrough]];
      case json::parse_event_t::array_start:
        if (++depth > kMaxJsonDepth) too_deep = true;
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end:
        --depth;
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && parsed.is_string() &&
            !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return !too_deep;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string(file) + ": " + std::string(what) +
                                " is not valid JSON (" + e.what() +
                                "); the file is corrupt or not in this format, re-download it");
  }
  if (too_deep) {
    return InvalidArgumentError(std::string(file) + ": " + std::string(what) +
                                " nests deeper than " + std::to_string(kMaxJsonDepth) +
                                " levels; the file is corrupt");
  }
  if (!duplicate.empty()) {
    return InvalidArgumentError(std::string(file) + ": " + std::string(what) + " has the key " +
                                Quote(duplicate) +
                                " twice; the file is corrupt, re-download or re-export it");
  }
  return root;
}

}  // namespace sy::storage
