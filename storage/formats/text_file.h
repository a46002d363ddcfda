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

// Deepest nesting of objects and arrays that ParseStrictJson accepts.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`, rejecting duplicate object keys and documents deeper than kMaxJsonDepth.
// InvalidArgument naming `file` and `what` ("the safetensors header", "tokenizer.json") otherwise.
Result<nlohmann::json> ParseStrictJson(std::string_view text, std::string_view file,
                                       std::string_view what);

// `s` in double quotes, cut at 80 bytes, with control bytes shown as '?'.
std::string Quote(std::string_view s);

}  // namespace sy::storage
