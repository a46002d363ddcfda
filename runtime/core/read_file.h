// ReadFile: the whole of a file in one string, the one reader behind every file Switchyard loads
// whole (configs, JSON documents, access traces, predictor files, prompt lists). For a large file
// read in place, map it instead (runtime/core/mapped_file.h).
//
// Ownership: returns the bytes by value. Thread-safety: a pure function of the file.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

inline constexpr size_t kNoFileSizeLimit = std::numeric_limits<size_t>::max();

// The bytes of `path` (any content; the string is not checked to be text).
//   NotFound         "<path> does not exist"
//   InvalidArgument  "<path> is a directory, not a regular file" (or a FIFO, a device: nothing
//                    blocks on them, runtime/core/regular_file.h), or "<path> is larger than
//                    <max_bytes> bytes" when it is (so a wrong path to a huge file fails fast),
//                    followed by "; it is not <what>" when `what` is given ("a model config")
//   IOError          naming the call that failed and the errno text
Result<std::string> ReadFile(const std::string& path, size_t max_bytes = kNoFileSizeLimit,
                             std::string_view what = {});

}  // namespace sy
