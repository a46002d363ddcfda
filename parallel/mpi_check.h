// Private to parallel/: SY_MPI_CHECK, the vendor check for MPI calls (from SY_VENDOR_CHECK_GEN).
// An MPI call that fails leaves the job in an unknown state, so it aborts through SY_CHECK, which
// under MpiEnvironment ends every rank. Communicators set MPI_ERRORS_RETURN, so failures reach
// this check (with file:line) instead of MPI's own handler.
// Thread-safety: MpiErrorString is safe from any thread MPI allows calls from.
#pragma once

#include <mpi.h>

#include <string>

#include "runtime/core/vendor_check.h"

namespace sy::internal {

inline std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error";
  return std::string(text, static_cast<size_t>(length));
}

}  // namespace sy::internal

#define SY_MPI_CHECK(expr) \
  SY_VENDOR_CHECK_GEN(expr, MPI_SUCCESS, ::sy::internal::MpiErrorString, "MPI")
