// CheckpointDirLock: one training run per checkpoint.dir.
//
// Two runs writing step-*.h5 files into one directory would mix their checkpoints, and a later
// --resume would pick whichever is newest. The run that writes checkpoints (rank 0) takes an
// exclusive flock() on "<dir>/switchyard.lock" before it reads or writes anything there, and
// records "pid <pid> host <host>" in it; a second run finds the lock taken and refuses, naming
// that pid and host. The kernel drops the lock when the process ends, however it ends (a SIGKILL
// included), so a stale lock never blocks a restart. The file itself stays (removing it would
// race with the next run taking it).
//
// File systems without flock (some NFS mounts) give no lock: Acquire then succeeds without one
// and says so in `warning`.
//
// Ownership: owns the open lock file; the lock is held until destruction. Thread-safety: none
// needed (one per run, on the thread that drives the trainer).
#pragma once

#include <memory>
#include <string>

#include "runtime/core/status.h"

namespace sy::launcher {

class CheckpointDirLock {
 public:
  // Takes the lock on `dir` (which must exist). FailedPrecondition naming the holder's pid and
  // host when another process holds it; an errno Status naming the lock file when it cannot be
  // opened. Where the file system has no locks, `*warning` says so (it is cleared otherwise).
  static Result<std::unique_ptr<CheckpointDirLock>> Acquire(const std::string& dir,
                                                            std::string* warning);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  // "<dir>/switchyard.lock".
  static std::string LockPath(const std::string& dir);

 private:
  explicit CheckpointDirLock(int fd) : fd_(fd) {}
  int fd_;  // the open lock file, -1 when the file system gave no lock
};

}  // namespace sy::launcher
