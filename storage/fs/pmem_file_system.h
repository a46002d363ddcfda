// PmemFileSystem: files mapped with libpmem2 and accessed with loads and stores.
//
// Each file is mapped whole with PMEM2_GRANULARITY_PAGE requested, so it runs on any file (an
// ordinary ext4 file: persisting is msync) and on real persistent memory (a DAX file: persisting
// flushes CPU caches). Writes are copies into the mapping; Sync() persists every range written
// since the last Sync through pmem2_get_persist_fn. Growing or truncating the file persists,
// unmaps and remaps it. A write past the end grows the file first.
//
// Ownership: a File owns its descriptor and its pmem2 mapping (PmemMapping, RAII). Files borrow the
// file system's worker threads and must be destroyed before it.
// Thread-safety: fully thread-safe (see storage/fs/file_system.h); reads and writes run concurrently
// with each other and exclude a remap.
#pragma once

#include <memory>
#include <string>

#include "runtime/core/thread_pool.h"
#include "storage/fs/file_system.h"

namespace sy::storage {

class PmemFileSystem : public FileSystem {
 public:
  explicit PmemFileSystem(const IoOptions& options = {});
  ~PmemFileSystem() override;
  PmemFileSystem(const PmemFileSystem&) = delete;
  PmemFileSystem& operator=(const PmemFileSystem&) = delete;

  std::string name() const override { return "pmem"; }
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;

 private:
  IoOptions options_;
  std::unique_ptr<ThreadPool> pool_;  // null when io_threads == 0
};

}  // namespace sy::storage
