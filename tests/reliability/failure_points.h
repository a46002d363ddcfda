// Every failure point of a durable operation, in turn (SQLite's method).
//
// A DurableOperation runs against a FaultInjectionFileSystem over a MemFileSystem. The harness
// first runs it once without faults and reads the file system's journal: every read, write, sync,
// rename and directory sync it performed is a failure point. Then, for each point and each fault
// (EIO; ENOSPC where the call can return it; a crash at that point, torn for a write), it starts
// again from the prepared state, fails that one call and checks:
//   - the operation returned an error Status naming the file it was working on,
//   - after a restart (unsynced data dropped, torn for a torn write; every object reopened) the
//     state verifies as the previous one or the new one, never a mix, never corrupt,
//   - the next run of the operation succeeds and leaves the new state.
// Nothing may crash the test process (an abort is a failure of the whole test).
//
// Thread-safety: RunEveryFailurePoint runs on the calling thread; the operation may use threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "storage/fs/fault_injection_file_system.h"
#include "storage/fs/file_system.h"

namespace sy::reliability {

// Which state a verified file system holds.
enum class DurableState : uint8_t { kPrevious, kNew };

struct DurableOperation {
  std::string name;
  // A substring every failure Status must contain: the file (or directory) the operation writes.
  std::string file;
  // Brings an empty file system to the previous, complete state. Runs without faults.
  std::function<Status(storage::FileSystem&)> prepare;
  // The operation under test. It opens what it needs and closes everything before returning.
  std::function<Status(storage::FileSystem&)> run;
  // After a restart: which complete state the file system holds, or an error when it holds
  // neither (corrupt, mixed, missing).
  std::function<Result<DurableState>(storage::FileSystem&)> verify;
};

struct FailurePointReport {
  int points = 0;         // distinct calls in one run of the operation
  int trials = 0;         // points x faults tried
  int not_reached = 0;    // trials whose fault did not fire (a call the run no longer made)
  int failures = 0;       // trials that broke a rule above
  int recovered_new = 0;  // trials whose restart found the new state (the fault came too late
                          // to lose it: e.g. the directory sync after the rename)
  std::vector<std::string> messages;  // one line per failure
};

FailurePointReport RunEveryFailurePoint(const DurableOperation& operation);

}  // namespace sy::reliability
