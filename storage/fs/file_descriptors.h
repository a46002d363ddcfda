// File descriptors for the file systems that do real I/O (posix, io_uring): open a file buffered
// and, when asked, also with O_DIRECT; full-length pread/pwrite loops; and the alignment rule that
// decides which descriptor an op may use.
//
// O_DIRECT is refused with EINVAL by some file systems (tmpfs, some overlays). OpenFilePair then
// keeps only the buffered descriptor and logs the reason once per process.
//
// Ownership: FilePair owns both descriptors.
// Thread-safety: the functions are reentrant; the descriptors may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/core/status.h"
#include "runtime/core/unique_fd.h"
#include "storage/fs/file_system.h"

namespace sy::storage {

// Direct I/O needs offset, length and buffer address aligned to this.
inline constexpr size_t kDirectAlignment = 4096;

struct FilePair {
  UniqueFd buffered;  // always open
  UniqueFd direct;    // open with O_DIRECT, or invalid when not asked for or refused
};

Result<FilePair> OpenFilePair(const std::string& path, const OpenOptions& options, bool direct);

// The part of a File that a descriptor pair answers the same way whatever carries the data
// (posix worker threads or io_uring): path, sync, truncate, size, preallocation, alignment and
// the lock. Subclasses implement Read, Write and SubmitBatch.
class FilePairFile : public File {
 public:
  FilePairFile(std::string path, FilePair fds) : path_(std::move(path)), fds_(std::move(fds)) {}

  const std::string& path() const override { return path_; }
  Status Sync() override;
  Status Truncate(uint64_t size) override;
  Result<uint64_t> Size() override;
  Status Preallocate(uint64_t size) override;
  size_t alignment() const override;
  // The descriptor that carries the aligned I/O holds the lock, so requests still in flight on it
  // keep the file locked.
  Status LockExclusive(int64_t timeout_ms) override;

 protected:
  std::string path_;
  FilePair fds_;
};

inline bool IsAligned(uint64_t value, size_t alignment) { return value % alignment == 0; }
inline bool IsDirectEligible(uint64_t offset, const void* data, size_t length) {
  return IsAligned(offset, kDirectAlignment) && IsAligned(length, kDirectAlignment) &&
         IsAligned(reinterpret_cast<uintptr_t>(data), kDirectAlignment);
}

// Reads/writes exactly `length` bytes, looping over short transfers, EINTR and EAGAIN. A read that
// reaches end of file first is a DataLoss error. Messages name `path` and the offset.
Status PreadFull(int fd, const std::string& path, uint64_t offset, void* data, size_t length);
Status PwriteFull(int fd, const std::string& path, uint64_t offset, const void* data,
                  size_t length);

// Runs one op on a FilePair: direct when eligible; with an aligned bounce buffer when only the
// address is unaligned; buffered otherwise.
Status RunOpOnPair(const FilePair& fds, const std::string& path, const IoOp& op);

Status FdSync(int fd, const std::string& path);
// flock(LOCK_EX) with retries until `timeout_ms`; FailedPrecondition naming the path when taken.
Status FdLockExclusive(int fd, const std::string& path, int64_t timeout_ms);
Status FdTruncate(int fd, const std::string& path, uint64_t size);
// posix_fallocate(0, size); falls back to ftruncate where the file system cannot (EOPNOTSUPP).
Status FdPreallocate(int fd, const std::string& path, uint64_t size);
Result<uint64_t> FdSize(int fd, const std::string& path);

}  // namespace sy::storage
