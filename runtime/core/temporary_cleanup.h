// ScopedTemporary: a temporary file or staging directory that is removed on every way out,
// Ctrl-C and SIGTERM included.
//
// A writer stages its output under a temporary name (runtime/core/file_creation.h) and renames
// it into place at the end. The ScopedTemporary removes the temporary when it goes out of scope
// without Release() (an error return), and, once InstallTemporaryCleanupOnSignals has run, when
// the process is ended by SIGINT, SIGTERM or SIGHUP: the handler removes every live temporary
// (a directory with everything in it) and then ends the process by the same signal, as if no
// handler had been installed (exit status 128 + signal). Only SIGKILL, a crash or a power cut
// leave one behind; the next writer of the same path removes those
// (storage/hdf5/durable_replace.h).
//
// Commands that handle the stop signals themselves (`train`, `serve`) call
// RemoveTemporariesNow just before they die by a signal.
//
// Limits: 64 live temporaries per process, paths under PATH_MAX bytes; beyond them a temporary
// is still removed by its destructor, but not by the signal handler, and a warning says so.
//
// Ownership: the ScopedTemporary owns the removal of its path until Release(). Thread-safety:
// any thread may create and destroy them; the registry is lock-free so that the handler can
// read it.
#pragma once

#include <string>

namespace sy {

class ScopedTemporary {
 public:
  ScopedTemporary() = default;
  // Registers `path` (which need not exist yet).
  explicit ScopedTemporary(std::string path);
  // Removes the path (a file, or a directory and everything in it) unless released.
  ~ScopedTemporary();
  ScopedTemporary(ScopedTemporary&& other) noexcept;
  ScopedTemporary& operator=(ScopedTemporary&& other) noexcept;
  ScopedTemporary(const ScopedTemporary&) = delete;
  ScopedTemporary& operator=(const ScopedTemporary&) = delete;

  const std::string& path() const { return path_; }
  // The path was renamed into place (or handed on): keep it; stop tracking it.
  void Release();
  // Removes the path now and stops tracking it.
  void Remove();

 private:
  void Unregister();

  std::string path_;
  int slot_ = -1;  // in the signal handler's registry, or -1
};

// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every live temporary and then end
// the process by the signal; a signal the process inherited as ignored (nohup) stays ignored.
// The work is done on the calling thread (a signal that lands on another thread is passed on to
// it), so that thread must be the one that creates the temporaries: call it from main, before
// starting work. Idempotent. A command that installs its own handlers afterwards replaces these.
void InstallTemporaryCleanupOnSignals();

// Removes every live temporary. Async-signal-safe (only open, getdents64, unlinkat, close).
void RemoveTemporariesNow();

}  // namespace sy
