#include "runtime/core/check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace sy {
namespace {

void DefaultFatalHandler(const std::string& text) {
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

std::atomic<FatalHandler> g_fatal_handler{nullptr};

}  // namespace

FatalHandler SetFatalHandler(FatalHandler handler) { return g_fatal_handler.exchange(handler); }

namespace internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << ": ";
}

CheckFailure::~CheckFailure() {
  FatalHandler handler = g_fatal_handler.load();
  std::string text = stream_.str();
  if (handler != nullptr) handler(text);
  // A handler must not return; if it does, the default still ends the process.
  DefaultFatalHandler(text);
  __builtin_unreachable();
}

}  // namespace internal
}  // namespace sy
