// The one place Switchyard reads environment variables (as NCCL_PARAM does). Each variable is
// documented where it is used and in the README's "Environment" paragraph.
// Thread-safety: reads only; safe from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace sy {

// The integer value of `name`, or `fallback` when unset or not an integer.
int64_t EnvInt(const char* name, int64_t fallback);
// The value of `name`, or `fallback` when unset.
std::string EnvString(const char* name, const std::string& fallback);

}  // namespace sy
