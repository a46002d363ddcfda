// Logging: the one path for the diagnostics every layer writes (spdlog), on stderr so that stdout
// holds only a command's output (tokens, JSON, tables), with one level for the whole process.
//
//   switchyard --log-level debug train ...     or     SY_LOG_LEVEL=warning switchyard train ...
//
// Levels: trace, debug, info (default), warning (or warn), error, off. Lines read "warning: ...",
// "info: ...", as the rest of the command-line output does. A command's own report (the load
// line, statistics, progress) is not logging and is printed whatever the level.
//
// Ownership: spdlog's default logger, replaced once. Thread-safety: ConfigureLogging at startup,
// before other threads log; logging itself is thread-safe (spdlog's _mt sink).
#pragma once

#include <string_view>

#include "runtime/core/status.h"

namespace sy {

// Sends spdlog's default logger to stderr at `level` (empty: $SY_LOG_LEVEL, else info).
// InvalidArgument naming the accepted levels for another word.
Status ConfigureLogging(std::string_view level);

}  // namespace sy
