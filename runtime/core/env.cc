#include "runtime/core/env.h"

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace sy {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr) return fallback;
  int64_t value = 0;
  const char* end = text + std::strlen(text);
  auto [ptr, ec] = std::from_chars(text, end, value);
  if (ec != std::errc() || ptr != end) return fallback;
  return value;
}

std::string EnvString(const char* name, const std::string& fallback) {
  const char* text = std::getenv(name);
  return text == nullptr ? fallback : std::string(text);
}

}  // namespace sy
