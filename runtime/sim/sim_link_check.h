// CheckSimLink: measures the sim device's host->device link against its setting, as
// `switchyard selftest` does. A sim copy is a real memcpy followed by a wait for the modelled end
// (sim_backend.h), so the link can never be faster than this host's memcpy: the check measures
// both side by side (64 MiB, the best of three runs each) and expects the link to reach at least
// half of the slower of the two, and never to beat its setting by more than 1%.
//
// Ownership: returns a value. Thread-safety: creates its own SimBackend; callable from any
// thread.
#pragma once

#include "runtime/core/status.h"

namespace sy {

struct SimLinkCheck {
  double link_gbps = 0;      // the setting
  double memcpy_gbps = 0;    // this host's memcpy, measured
  double achieved_gbps = 0;  // the sim link, measured
  double expected_gbps = 0;  // min(link_gbps, memcpy_gbps)
  bool passed = false;
};

// ResourceExhausted or the backend's error when the 64 MiB buffers cannot be allocated.
Result<SimLinkCheck> CheckSimLink(double link_gbps);

}  // namespace sy
