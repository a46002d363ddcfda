// libFuzzer target for the expert access trace parser (storage/cache/access_trace.h): any input must
// parse or give a Status, and whatever parses must survive a format/parse round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "storage/cache/access_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sy::storage;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  sy::Result<AccessTrace> trace = ParseTrace(text, "fuzz");
  if (!trace.ok()) return 0;
  sy::Result<AccessTrace> again = ParseTrace(FormatTrace(*trace), "again");
  if (!again.ok() || again->accesses.size() != trace->accesses.size()) __builtin_trap();
  return 0;
}
