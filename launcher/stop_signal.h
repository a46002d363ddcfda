// Stop signals: SIGTERM and SIGINT ask a long command (`switchyard train`) to stop at its next safe
// point instead of dying mid-step. Schedulers send SIGTERM some time before they kill; Ctrl-C
// sends SIGINT.
//
// The first signal stores its number in the flag InstallStopSignalHandlers returns and writes one
// line to stderr; the command finishes what it is doing, saves, and exits 0. A second signal, of
// either kind, ends the process at once, as if no handler had been installed (exit status
// 128 + signal).
//
// Thread-safety: install once, from the main thread, before starting work; the flag may be read
// from any thread.
#pragma once

#include <atomic>

namespace sy::launcher {

// Installs the handlers (idempotent) and returns the flag: 0 until a stop signal arrives, then
// its number.
const std::atomic<int>& InstallStopSignalHandlers();

}  // namespace sy::launcher
