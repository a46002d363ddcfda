// PosixFileSystem: pread/pwrite on real files, optionally O_DIRECT (see IoOptions::direct).
//
// Asynchronous batches run on `io_threads` worker threads (inline when 0), each op as a blocking
// pread/pwrite loop. Aligned ops go through the O_DIRECT descriptor; unaligned ones through the
// buffered descriptor of the same file, so any request works.
//
// Ownership: the file system owns its worker threads; Files borrow them and must be destroyed
// before it.
// Thread-safety: fully thread-safe (see storage/fs/file_system.h).
#pragma once

#include <memory>
#include <string>

#include "runtime/core/thread_pool.h"
#include "storage/fs/file_system.h"

namespace sy::storage {

class PosixFileSystem : public FileSystem {
 public:
  explicit PosixFileSystem(const IoOptions& options = {});
  ~PosixFileSystem() override;
  PosixFileSystem(const PosixFileSystem&) = delete;
  PosixFileSystem& operator=(const PosixFileSystem&) = delete;

  std::string name() const override { return "posix"; }
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;

 private:
  IoOptions options_;
  std::unique_ptr<ThreadPool> pool_;  // null when io_threads == 0
};

// Directory and name operations shared by the file systems over real files.
Status PosixRename(const std::string& from, const std::string& to);
Status PosixRemove(const std::string& path);
Result<bool> PosixExists(const std::string& path);
Status PosixSyncDir(const std::string& dir);

}  // namespace sy::storage
