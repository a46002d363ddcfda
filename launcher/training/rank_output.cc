#include "launcher/training/rank_output.h"

#include <sys/types.h>

#include <cstdlib>
#include <string>

#include "runtime/core/check.h"

namespace sy::launcher {
namespace {

// A line-prefixing stream over stdout (glibc fopencookie). '\r' also starts a line, so a
// progress bar redrawn in place keeps its prefix.
struct PrefixedStdout {
  std::string prefix;
  bool at_line_start = true;
};

ssize_t WritePrefixed(void* cookie, const char* data, size_t size) {
  auto* c = static_cast<PrefixedStdout*>(cookie);
  for (size_t i = 0; i < size; ++i) {
    if (c->at_line_start) std::fputs(c->prefix.c_str(), stdout);
    std::fputc(data[i], stdout);
    c->at_line_start = data[i] == '\n' || data[i] == '\r';
  }
  std::fflush(stdout);
  return static_cast<ssize_t>(size);
}

int ClosePrefixed(void* cookie) {
  delete static_cast<PrefixedStdout*>(cookie);
  return 0;
}

}  // namespace

bool LaunchedByMpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

RankOutput::RankOutput(int rank, int size, bool all_ranks) {
  if (size <= 1 || (rank == 0 && !all_ranks)) return;
  if (!all_ranks) {
    file_ = std::fopen("/dev/null", "w");
    SY_CHECK(file_ != nullptr) << "cannot open /dev/null";
  } else {
    auto* cookie = new PrefixedStdout{"[rank " + std::to_string(rank) + "] "};
    cookie_io_functions_t io{};
    io.write = WritePrefixed;
    io.close = ClosePrefixed;
    file_ = fopencookie(cookie, "w", io);
    SY_CHECK(file_ != nullptr) << "fopencookie failed";
    setvbuf(file_, nullptr, _IOLBF, 0);
  }
  owned_ = true;
}

RankOutput::~RankOutput() {
  if (owned_) std::fclose(file_);
}

}  // namespace sy::launcher
