// FileSystem and File: the one interface through which the storage stack does I/O.
//
// Implementations: posix (pread/pwrite), io_uring (O_DIRECT, batched, liburing), pmem (libpmem2,
// page granularity), in-memory (tests) and a fault-injecting wrapper. MakeFileSystem() builds one
// by name and falls back to posix, with a logged reason, when io_uring or pmem cannot run here.
//
// Semantics shared by every implementation:
//   - Read/Write move exactly `length` bytes or fail. A read that runs past the end of the file is
//   a
//     DataLoss error naming the file and the offset. Errors name the file and the offset.
//   - Write is not durable until Sync() returns OK. Sync is fdatasync: data and the file size.
//   - SyncDir makes a create/rename/remove inside a directory durable.
//   - alignment() is the size and address alignment (offset, length, buffer) at which the file
//     does direct I/O with no bounce copy. Unaligned requests still work, through a bounce buffer
//     or a buffered path, only slower.
//
// Ownership: Open returns a File that the caller owns. A File must not outlive its FileSystem.
// Buffers passed to SubmitBatch are borrowed: they must stay valid until their callback ran.
// Thread-safety: every method of File and FileSystem may be called from any thread, concurrently,
// except that a File must not be destroyed while any of its operations are in flight. Callbacks
// run on an I/O thread (or inline, before SubmitBatch returns); they must be short and must not
// wait for other I/O of the same file system.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy::storage {

enum class IoKind : uint8_t { kRead, kWrite };

// One read or write at an offset. For writes `data` is only read.
struct IoOp {
  IoKind kind = IoKind::kRead;
  uint64_t offset = 0;
  void* data = nullptr;
  size_t length = 0;
};

// Called exactly once per op of a batch with the op's index in the batch and its result.
using IoDone = std::function<void(size_t index, Status status)>;

struct OpenOptions {
  bool create = false;     // Default: false. Create the file when it does not exist.
  bool truncate = false;   // Default: false. Truncate it to 0 bytes on open.
  bool read_only = false;  // Default: false. Open for reading only; writes fail.
  // Default: false. With `create`: the path must not exist, not even as a symbolic link
  // (AlreadyExists, or FailedPrecondition naming the link). Every file system refuses to follow a
  // symbolic link where it opens or creates a file (a store file, a scratch file), and to open
  // anything but a regular file (runtime/core/file_creation.h, runtime/core/regular_file.h).
  bool exclusive = false;
};

class File {
 public:
  virtual ~File() = default;

  virtual const std::string& path() const = 0;

  // Submits every op. `done` is called once per op, in any order, from an I/O thread or inline.
  virtual void SubmitBatch(std::span<const IoOp> ops, IoDone done) = 0;

  // Synchronous forms. The defaults go through SubmitBatch and wait.
  virtual Status Read(uint64_t offset, void* data, size_t length);
  virtual Status Write(uint64_t offset, const void* data, size_t length);

  // Data and size written so far are durable when this returns OK.
  virtual Status Sync() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual Result<uint64_t> Size() = 0;
  // Reserves disk blocks for [0, size) (fallocate), growing the file to `size` if smaller, so
  // later writes cannot fail for space. Default: grows the file with Truncate when smaller.
  virtual Status Preallocate(uint64_t size);

  // Alignment for no-copy direct I/O (1: any). Default: 1.
  virtual size_t alignment() const { return 1; }

  // Takes an exclusive advisory lock on the file (flock), waiting up to `timeout_ms` for another
  // holder; FailedPrecondition when it stays taken. The lock lasts until the File is closed and
  // every I/O it started has drained (in-flight io_uring requests of a killed process keep it),
  // so two processes never write one store. Default (in-memory files): always granted.
  virtual Status LockExclusive(int64_t timeout_ms) { return Status::Ok(); }

  // One op as a future; the buffer must stay valid until the future is ready.
  std::future<Status> ReadAsync(uint64_t offset, void* data, size_t length);
  std::future<Status> WriteAsync(uint64_t offset, const void* data, size_t length);
  // Submits `ops` and waits for all of them; returns the first failure.
  Status RunBatch(std::span<const IoOp> ops);
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // "posix", "io_uring", "pmem", "mem", or "fault(<base>)".
  virtual std::string name() const = 0;

  virtual Result<std::unique_ptr<File>> Open(const std::string& path,
                                             const OpenOptions& options) = 0;
  // Atomically renames `from` to `to`, which must not exist: AlreadyExists "<to> exists" when
  // anything is there, whenever it appeared (renameat2 RENAME_NOREPLACE). Nothing is replaced.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Remove(const std::string& path) = 0;
  virtual Result<bool> Exists(const std::string& path) = 0;
  // Makes entries created, renamed or removed in `dir` durable.
  virtual Status SyncDir(const std::string& dir) = 0;

  // A hint that these host regions will be used as I/O buffers for the life of the file system
  // (io_uring registers them as fixed buffers). The regions must outlive the file system or a
  // later UnregisterBuffers. Default: ignored, OK.
  virtual Status RegisterBuffers(std::span<const iovec> regions) { return Status::Ok(); }
  virtual void UnregisterBuffers() {}
};

// Options for the file systems that do real I/O. Each field says which implementations use it.
struct IoOptions {
  // posix, io_uring: open with O_DIRECT. Where the file system refuses O_DIRECT (EINVAL on tmpfs,
  // some overlays) the file is opened buffered and the reason is logged once. Default: true.
  bool direct = true;
  // io_uring: a request larger than this is split into blocks of this size. Bytes; a multiple of
  // 4096. Default: 64 MiB, so an expert extent goes to the kernel as one request, as fio's
  // bs=extent does; the block layer splits it at the device's max_sectors_kb itself, which measured
  // faster than splitting it here (benchmarks/storage-results.md).
  size_t block_size = size_t{64} << 20;
  // io_uring: blocks in flight per ring. Default: 32.
  int queue_depth = 32;
  // posix, pmem, mem: worker threads that run asynchronous batches. 0 runs them inline.
  // Default: 4.
  int io_threads = 4;
  // io_uring: use fixed (registered) buffers for I/O that lands inside RegisterBuffers regions.
  // Default: true.
  bool register_buffers = true;
};

// Builds a file system by name: "posix", "io_uring", "pmem" or "mem". "io_uring" and "pmem" fall
// back to posix, logging why, when this build lacks the library or the kernel refuses it; the
// returned file system's name() says which one runs.
Result<std::unique_ptr<FileSystem>> MakeFileSystem(std::string_view name,
                                                   const IoOptions& options = {});

// The directory part of a path ("." when it has none).
std::string DirName(const std::string& path);

namespace internal {

// Runs each op of a batch with `run_one` on `pool_submit` (or inline when it is null) and reports
// through `done`. Shared by the implementations whose async form is their sync form on a thread.
using RunOneFn = std::function<Status(const IoOp& op)>;
using PoolSubmitFn = std::function<void(std::function<void()>)>;
void SubmitOnPool(std::span<const IoOp> ops, const IoDone& done, const RunOneFn& run_one,
                  const PoolSubmitFn& pool_submit);

// "read /x/y at offset 4096 (8192 bytes)" style context.
std::string OpContext(IoKind kind, const std::string& path, uint64_t offset, size_t length);

}  // namespace internal

}  // namespace sy::storage
