// ReadTextFile: reads a small whole file (a config.json, a safetensors index) into a string, with
// a size cap so a wrong path to a huge file fails fast. WriteTextFile: the other way, for reports.
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

// NotFound when `path` does not exist, IOError naming the call and errno text, InvalidArgument
// when the file is larger than `max_bytes` (the message says it is not a `what`).
Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes,
                                 const std::string& what);

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
