#include "inference/token_ids.h"

#include <charconv>
#include <string>

namespace sy {

Result<std::vector<int32_t>> ParseTokenIds(std::string_view text, std::string_view where) {
  std::vector<int32_t> ids;
  auto is_separator = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n';
  };
  size_t at = 0;
  while (at < text.size()) {
    if (is_separator(text[at])) {
      ++at;
      continue;
    }
    size_t end = at;
    while (end < text.size() && !is_separator(text[end])) ++end;
    const std::string_view item = text.substr(at, end - at);
    int32_t id = -1;
    const auto [stop, error] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (error != std::errc() || stop != item.data() + item.size() || id < 0) {
      return InvalidArgumentError(std::string(where) + ": \"" + std::string(item) +
                                  "\" is not a token id; use non-negative integers separated by "
                                  "commas or spaces, e.g. 1,2,3");
    }
    ids.push_back(id);
    at = end;
  }
  return ids;
}

std::string FormatTokenIds(std::span<const int32_t> ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

}  // namespace sy
