// Private to parallel/: SY_NCCL_CHECK, the vendor check for NCCL calls (from SY_VENDOR_CHECK_GEN).
// A failed NCCL call leaves the communicator and the device in an unknown state, so it aborts
// through SY_CHECK, which under MpiEnvironment ends every rank of the job.
// Built only when SY_HAVE_NCCL. Thread-safety: a macro over its argument; no shared state.
#pragma once

#include <nccl.h>

#include "runtime/core/vendor_check.h"

#define SY_NCCL_CHECK(expr) SY_VENDOR_CHECK_GEN(expr, ncclSuccess, ncclGetErrorString, "NCCL")
