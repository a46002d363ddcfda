// FaultInjectionFileSystem: a wrapper that fails chosen operations of another file system, and
// simulates power loss by dropping what was never synced (RocksDB's FaultInjectionTestFS).
//
// Faults are rules: "the 3rd write to a path containing 'store' fails with ENOSPC", "every sync
// fails with EIO", "the next write stores only 100 bytes", "the next write is torn and the
// machine dies", "the rename fails", "every read takes 20 ms longer". Once crashed, every operation
// fails until DropUnsyncedData() "reboots".
//
// Every read, write, sync, rename and directory sync is also logged in a journal (journal()), so
// a test can enumerate an operation's failure points and then fail each in turn (SQLite's
// method; tests/reliability/failure_points.h).
//
// To simulate power loss the wrapper keeps, per path, the old contents of every range written
// since that path's last successful Sync. DropUnsyncedData() puts them back (all of them, or a
// random subset of 512-byte sectors, for torn writes). Only file contents are tracked: creating,
// renaming and removing files are durable at once.
//
// Ownership: borrows the base file system, which must outlive the wrapper and its Files.
// Thread-safety: fully thread-safe. Operations run synchronously on the calling thread (batch
// callbacks run inline), so rules fire in a well-defined order.
#pragma once

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/mutex.h"
#include "storage/fs/file_system.h"

namespace sy::storage {

enum class FaultOp : uint8_t { kRead, kWrite, kSync, kRename, kSyncDir };

// "read", "write", "sync", "rename", "sync directory".
const char* FaultOpName(FaultOp op);

// One operation as the journal saw it: its kind and its path (the source path of a rename).
struct FaultPoint {
  FaultOp op = FaultOp::kWrite;
  std::string path;
};

enum class FaultKind : uint8_t {
  kError,       // the op fails with `error` and changes nothing
  kShortWrite,  // a write stores only its first `short_bytes` bytes and fails
  kTornWrite,   // a write stores a random subset of its 512-byte sectors; then the system crashes
  kCrash,       // the system crashes before the op runs: it and every later op fail
  kDelay,       // the op waits `delay_us` on the calling thread, then runs normally (a slow device)
};

struct FaultRule {
  FaultOp op = FaultOp::kWrite;        // Default: writes.
  FaultKind kind = FaultKind::kError;  // Default: fail with `error`.
  int error = EIO;                     // errno for kError. Default: EIO.
  std::string path_contains;           // only paths containing this. Default: "" (every path).
  int64_t skip = 0;        // matching ops let through before the rule fires. Default: 0.
  int64_t times = 1;       // how many times it fires; -1 forever. Default: 1.
  size_t short_bytes = 0;  // bytes a kShortWrite stores. Default: 0.
  int64_t delay_us = 0;    // how long a kDelay op waits, in microseconds. Default: 0.
};

class FaultInjectionFileSystem : public FileSystem {
 public:
  explicit FaultInjectionFileSystem(FileSystem* base, uint64_t seed = 1);
  ~FaultInjectionFileSystem() override;
  FaultInjectionFileSystem(const FaultInjectionFileSystem&) = delete;
  FaultInjectionFileSystem& operator=(const FaultInjectionFileSystem&) = delete;

  std::string name() const override;
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;

  void AddRule(const FaultRule& rule) SY_EXCLUDES(mutex_);
  void ClearRules() SY_EXCLUDES(mutex_);
  // Faults fired so far, over all rules.
  int64_t faults_fired() const SY_EXCLUDES(mutex_);
  bool crashed() const SY_EXCLUDES(mutex_);
  // Every operation since construction or the last ClearJournal, in the order they ran.
  std::vector<FaultPoint> journal() const SY_EXCLUDES(mutex_);
  void ClearJournal() SY_EXCLUDES(mutex_);

  // Simulates power loss and reboot: reverts every byte written since its path's last successful
  // Sync (or, with `tear`, each unsynced 512-byte sector independently with probability 1/2),
  // then clears the crash. Close every File of this wrapper first.
  Status DropUnsyncedData(bool tear = false) SY_EXCLUDES(mutex_);

  // Internal, used by the wrapper's Files.
  struct Undo {
    uint64_t offset = 0;
    std::vector<uint8_t> old_bytes;  // what the range held before (up to the old size)
    uint64_t length = 0;             // bytes the write covered
    uint64_t old_size = 0;           // file size before the write
  };
  struct Decision {
    bool fire = false;
    FaultRule rule;
  };
  // The rule that fires for this op, if any. A kDelay rule has already slept when Check returns
  // and reports no fire (the op then runs normally).
  Decision Check(FaultOp op, const std::string& path) SY_EXCLUDES(mutex_);
  void RecordUndo(const std::string& path, Undo undo) SY_EXCLUDES(mutex_);
  void ForgetUndo(const std::string& path) SY_EXCLUDES(mutex_);
  void Crash() SY_EXCLUDES(mutex_);
  uint64_t NextRandom() SY_EXCLUDES(mutex_);

 private:
  struct RuleState {
    FaultRule rule;
    int64_t seen = 0;
    int64_t fired = 0;
  };

  FileSystem* base_;
  mutable Mutex mutex_;
  std::vector<RuleState> rules_ SY_GUARDED_BY(mutex_);
  std::map<std::string, std::vector<Undo>> undo_ SY_GUARDED_BY(mutex_);
  std::vector<FaultPoint> journal_ SY_GUARDED_BY(mutex_);
  bool crashed_ SY_GUARDED_BY(mutex_) = false;
  int64_t fired_ SY_GUARDED_BY(mutex_) = 0;
  std::mt19937_64 rng_ SY_GUARDED_BY(mutex_);
};

}  // namespace sy::storage
