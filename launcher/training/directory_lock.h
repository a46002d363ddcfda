// DirectoryLock: one training run per checkpoint.dir, and per expert store file.
//
// Two runs writing step-*.h5 files into one directory would mix their checkpoints, and a later
// --resume would pick whichever is newest; two runs on one expert store would overwrite each
// other's states. Before anything else touches such a directory, the run takes an exclusive
// flock() on a lock file in it and records "pid <pid> on host <host> since <UTC time>" there:
//   - checkpoint.dir: "<dir>/switchyard.lock", taken by rank 0 (training_loop.h);
//   - expert_store.dir: "<dir>/rank-<r>.lock", taken by each rank before it opens its store file
//     (trainer.h).
// A second run finds the lock taken and fails at once, naming that pid, host and time; with
// train.wait_for_lock (`--wait-for-lock`) it says that it is waiting, and waits. The kernel drops
// the lock when the process ends, however it ends (a SIGKILL included), so a stale lock never
// blocks a restart. The file itself stays (removing it would race with the next run taking it).
//
// The lock file is opened without following a symbolic link and must be a regular file: a link
// or a FIFO planted there is refused with an error naming it (runtime/core/file_creation.h).
// File systems without flock (some NFS mounts) give no lock: Acquire then succeeds without one
// and says so in `warning`.
//
// Ownership: owns the open lock file; the lock is held until destruction. Thread-safety: none
// needed (one per directory per rank, on the thread that drives the trainer).
#pragma once

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "runtime/core/status.h"
#include "runtime/core/unique_fd.h"

namespace sy::launcher {

struct DirectoryLockOptions {
  // The lock file's name in the directory. Default: "switchyard.lock".
  std::string lock_file = "switchyard.lock";
  // The config key that names the directory, for messages. Default: "checkpoint.dir".
  std::string config_key = "checkpoint.dir";
  // Default: false (fail at once). Wait for the holder to end, saying so once on `out`.
  bool wait = false;
  // Where the wait is announced. Default: stderr.
  std::FILE* out = nullptr;
  // Default: none. While waiting, a nonzero value (a stop signal's number) ends the wait with
  // the FailedPrecondition naming the holder. Not owned.
  const std::atomic<int>* stop = nullptr;
};

class DirectoryLock {
 public:
  // Takes the lock on `dir` (which must exist). FailedPrecondition "<key> <dir> is locked by pid
  // P on host H since T (<lock file>); ..." when another process holds it and `wait` is off;
  // FailedPrecondition naming a symbolic link, InvalidArgument naming a non-regular file, or an
  // errno Status naming the lock file when it cannot be opened. Where the file system has no
  // locks, `*warning` says so (it is cleared otherwise).
  static Result<std::unique_ptr<DirectoryLock>> Acquire(const std::string& dir,
                                                        const DirectoryLockOptions& options,
                                                        std::string* warning);
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  // "<dir>/<lock_file>".
  static std::string LockPath(const std::string& dir, const std::string& lock_file);

 private:
  explicit DirectoryLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // the open lock file, invalid when the file system gave no lock
};

}  // namespace sy::launcher
