#include "storage/hdf5/hdf5_error_detail.h"

#include <atomic>

namespace sy {
namespace {

std::atomic<bool> g_verbose{false};

}  // namespace

void SetHdf5VerboseErrors(bool verbose) { g_verbose.store(verbose, std::memory_order_relaxed); }

bool Hdf5VerboseErrors() { return g_verbose.load(std::memory_order_relaxed); }

}  // namespace sy
