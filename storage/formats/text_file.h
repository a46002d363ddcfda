// ReadTextFile: reads a small whole file (a config.json, a safetensors index) into a string, with
// a size cap so a wrong path to a huge file fails fast.
//
// Ownership: returns the text by value. Thread-safety: a pure function of the file.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/core/status.h"

namespace sy::storage {

// NotFound when `path` does not exist, IOError naming the call and errno text, InvalidArgument
// when the file is larger than `max_bytes` (the message says it is not a `what`).
Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes,
                                 const std::string& what);

}  // namespace sy::storage
