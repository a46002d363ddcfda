// MemFileSystem: files held in memory, for unit tests (LevelDB's NewMemEnv).
//
// Paths are plain keys; directories are implicit (SyncDir always succeeds). Files survive being
// closed and reopened for the life of the file system. Sync() is a no-op: nothing here is lost
// unless a FaultInjectionFileSystem on top drops it.
//
// Ownership: the file system owns the file contents; a File shares its file's contents, so a file
// removed while open stays readable through that File.
// Thread-safety: fully thread-safe. Asynchronous batches run on `io_threads` worker threads, or
// inline when 0.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/mutex.h"
#include "runtime/core/thread_pool.h"
#include "storage/fs/file_system.h"

namespace sy::storage {

class MemFileSystem : public FileSystem {
 public:
  explicit MemFileSystem(int io_threads = 0);
  ~MemFileSystem() override;
  MemFileSystem(const MemFileSystem&) = delete;
  MemFileSystem& operator=(const MemFileSystem&) = delete;

  std::string name() const override { return "mem"; }
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Status SyncDir(const std::string& dir) override { return Status::Ok(); }

  // Test access: a copy of the whole content of `path`, or NotFound.
  Result<std::vector<uint8_t>> Contents(const std::string& path);

  struct Data {
    Mutex mutex;
    std::vector<uint8_t> bytes SY_GUARDED_BY(mutex);
  };

 private:
  Mutex mutex_;
  std::map<std::string, std::shared_ptr<Data>> files_ SY_GUARDED_BY(mutex_);
  std::unique_ptr<ThreadPool> pool_;  // null when io_threads == 0
};

}  // namespace sy::storage
