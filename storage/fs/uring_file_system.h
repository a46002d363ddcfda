// UringFileSystem: batched asynchronous I/O through one io_uring ring (liburing), O_DIRECT.
//
// Each op is split into blocks of IoOptions::block_size; at most IoOptions::queue_depth blocks
// are in flight, the rest wait in a queue that completions drain. Short transfers are resubmitted
// for the remainder, -EAGAIN/-EINTR are retried, and an error is a Status naming the file and
// offset. Aligned ops (offset, length, address on 4096) use the O_DIRECT descriptor, with a fixed
// (registered) buffer when the address lies in a RegisterBuffers region; ops aligned in offset and
// length but not in address go through an aligned bounce buffer; anything else uses the buffered
// descriptor of the same file, still through the ring.
//
// Create() fails with Unavailable, naming the reason, when the kernel refuses io_uring (seccomp,
// io_uring_disabled, an old kernel) or when SY_IO_URING_DISABLE=1 is set (for testing the
// fallback); MakeFileSystem("io_uring") then logs it and uses posix.
//
// Ownership: the file system owns the ring and its completion thread; Files borrow them and must
// be destroyed first, after their I/O completed.
// Thread-safety: fully thread-safe (see storage/fs/file_system.h). Callbacks run on the completion
// thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "storage/fs/file_system.h"

namespace sy::storage {

class UringEngine;

class UringFileSystem : public FileSystem {
 public:
  static Result<std::unique_ptr<FileSystem>> Create(const IoOptions& options = {});
  ~UringFileSystem() override;
  UringFileSystem(const UringFileSystem&) = delete;
  UringFileSystem& operator=(const UringFileSystem&) = delete;

  std::string name() const override { return "io_uring"; }
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& options) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Result<bool> Exists(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  // Registers the regions as fixed buffers (at most 1024, each under 1 GiB). A second call
  // replaces the first. Only when IoOptions::register_buffers.
  Status RegisterBuffers(std::span<const iovec> regions) override;
  void UnregisterBuffers() override;

 private:
  UringFileSystem(const IoOptions& options, std::unique_ptr<UringEngine> engine);

  IoOptions options_;
  std::unique_ptr<UringEngine> engine_;
};

namespace internal {

// What to do with one completion of a block that still had `remaining` bytes to move.
enum class UringStep : uint8_t {
  kDone,       // all bytes moved
  kContinue,   // a short transfer: resubmit the rest (advance by `res`)
  kRetry,      // -EAGAIN / -EINTR: resubmit the same range
  kEndOfFile,  // a read returned 0 bytes before the range was complete
  kError,      // -errno
};
UringStep ClassifyUringCompletion(int res, size_t remaining);

}  // namespace internal
}  // namespace sy::storage
