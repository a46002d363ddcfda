// Token-id lists as people type them on a command line or in a prompts file: "1,2,3", "1 2 3".
//
// Ownership: values. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace sy {

// The ids in `text`, separated by commas and/or whitespace (empty items are skipped, so "" gives
// no ids). InvalidArgument naming `where` (a flag, or file:line) and the item for anything that
// is not a non-negative 32-bit integer.
Result<std::vector<int32_t>> ParseTokenIds(std::string_view text, std::string_view where);

// "1,2,3".
std::string FormatTokenIds(std::span<const int32_t> ids);

}  // namespace sy
