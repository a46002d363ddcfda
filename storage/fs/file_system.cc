#include "storage/fs/file_system.h"

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "runtime/core/build_info.h"
#include "runtime/core/mutex.h"
#include "storage/fs/mem_file_system.h"
#include "storage/fs/posix_file_system.h"
#if SY_HAVE_IO_URING
#include "storage/fs/uring_file_system.h"
#endif
#if SY_HAVE_PMEM
#include "storage/fs/pmem_file_system.h"
#endif

namespace sy::storage {
namespace {

// Collects the results of one batch for the synchronous helpers.
struct BatchWaiter {
  explicit BatchWaiter(size_t ops) : remaining(ops) {}
  Mutex mutex;
  size_t remaining SY_GUARDED_BY(mutex);
  Status first_error SY_GUARDED_BY(mutex);
  std::promise<Status> promise;
};

std::future<Status> SubmitOne(File& file, IoKind kind, uint64_t offset, void* data, size_t length) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  IoOp op{kind, offset, data, length};
  file.SubmitBatch(std::span<const IoOp>(&op, 1),
                   [promise](size_t, Status status) { promise->set_value(std::move(status)); });
  return future;
}

}  // namespace

Status File::Read(uint64_t offset, void* data, size_t length) {
  return SubmitOne(*this, IoKind::kRead, offset, data, length).get();
}

Status File::Write(uint64_t offset, const void* data, size_t length) {
  return SubmitOne(*this, IoKind::kWrite, offset, const_cast<void*>(data), length).get();
}

Status File::Preallocate(uint64_t size) {
  SY_ASSIGN_OR_RETURN(uint64_t current, Size());
  return current < size ? Truncate(size) : Status::Ok();
}

std::future<Status> File::ReadAsync(uint64_t offset, void* data, size_t length) {
  return SubmitOne(*this, IoKind::kRead, offset, data, length);
}

std::future<Status> File::WriteAsync(uint64_t offset, const void* data, size_t length) {
  return SubmitOne(*this, IoKind::kWrite, offset, const_cast<void*>(data), length);
}

Status File::RunBatch(std::span<const IoOp> ops) {
  if (ops.empty()) return Status::Ok();
  auto waiter = std::make_shared<BatchWaiter>(ops.size());
  std::future<Status> future = waiter->promise.get_future();
  SubmitBatch(ops, [waiter](size_t, Status status) {
    MutexLock lock(&waiter->mutex);
    if (!status.ok() && waiter->first_error.ok()) waiter->first_error = std::move(status);
    if (--waiter->remaining == 0) waiter->promise.set_value(waiter->first_error);
  });
  return future.get();
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Result<std::unique_ptr<FileSystem>> MakeFileSystem(std::string_view name,
                                                   const IoOptions& options) {
  if (name == "posix") return std::unique_ptr<FileSystem>(new PosixFileSystem(options));
  if (name == "mem") return std::unique_ptr<FileSystem>(new MemFileSystem(options.io_threads));
  if (name == "io_uring") {
#if SY_HAVE_IO_URING
    Result<std::unique_ptr<FileSystem>> uring = UringFileSystem::Create(options);
    if (uring.ok()) return uring;
    spdlog::warn("io_uring is unavailable ({}); falling back to posix pread/pwrite",
                 uring.status().message());
#else
    spdlog::warn(
        "io_uring requested but this build has no liburing; falling back to posix. "
        "Install liburing-dev and reconfigure with -DSY_ENABLE_IO_URING=ON.");
#endif
    return std::unique_ptr<FileSystem>(new PosixFileSystem(options));
  }
  if (name == "pmem") {
#if SY_HAVE_PMEM
    return std::unique_ptr<FileSystem>(new PmemFileSystem(options));
#else
    spdlog::warn(
        "pmem requested but this build has no libpmem2; falling back to posix. "
        "Install libpmem2-dev and reconfigure with -DSY_ENABLE_PMEM=ON.");
    return std::unique_ptr<FileSystem>(new PosixFileSystem(options));
#endif
  }
  return InvalidArgumentError("unknown file system '" + std::string(name) +
                              "': expected posix, io_uring, pmem or mem");
}

namespace internal {

void SubmitOnPool(std::span<const IoOp> ops, const IoDone& done, const RunOneFn& run_one,
                  const PoolSubmitFn& pool_submit) {
  if (!pool_submit) {
    for (size_t i = 0; i < ops.size(); ++i) done(i, run_one(ops[i]));
    return;
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    pool_submit([op = ops[i], i, done, run_one] { done(i, run_one(op)); });
  }
}

std::string OpContext(IoKind kind, const std::string& path, uint64_t offset, size_t length) {
  return std::string(kind == IoKind::kRead ? "read " : "write ") + path + " at offset " +
         std::to_string(offset) + " (" + std::to_string(length) + " bytes)";
}

}  // namespace internal
}  // namespace sy::storage
