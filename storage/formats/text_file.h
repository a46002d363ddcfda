// WriteTextFile: a report or table to a file (to read a whole file, runtime/core/read_file.h).
// ParseStrictJson: JSON from an untrusted file, refusing duplicate keys and deep nesting. Quote: a
// string from a file, made safe to print.
//
// Ownership: returns the text by value. Thread-safety: a pure function of the file.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy::storage {

// Writes `text` to `path`, replacing the file (not atomically: a report or a table, not state).
// IOError naming the path.
Status WriteTextFile(const std::string& path, std::string_view text);

// Deepest nesting of objects and arrays that ParseStrictJson accepts.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`, rejecting duplicate object keys and documents deeper than kMaxJsonDepth.
// InvalidArgument naming `file` and `what` ("the safetensors header", "tokenizer.json") otherwise.
Result<nlohmann::json> ParseStrictJson(std::string_view text, std::string_view file,
                                       std::string_view what);

// `s` in double quotes, cut at 80 bytes, with control bytes shown as '?'.
std::string Quote(std::string_view s);

}  // namespace sy::storage
