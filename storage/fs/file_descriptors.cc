#include "storage/fs/file_descriptors.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "runtime/core/file_creation.h"
#include "runtime/core/regular_file.h"

namespace sy::storage {
namespace {

std::string At(const std::string& path, uint64_t offset, size_t length) {
  return path + " at offset " + std::to_string(offset) + " (" + std::to_string(length) + " bytes)";
}

// A bounce copy never needs to be larger than this; bigger requests go through it in pieces.
constexpr size_t kBounceBytes = size_t{1} << 20;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

Result<FilePair> OpenFilePair(const std::string& path, const OpenOptions& options, bool direct) {
  FilePair pair;
  if (options.create && options.exclusive) {
    SY_ASSIGN_OR_RETURN(pair.buffered, CreateNewFile(path, 0644, !options.read_only));
  } else if (options.create) {
    // Created when missing, never through a symbolic link; then checked as any open is.
    SY_ASSIGN_OR_RETURN(pair.buffered,
                        OpenNoFollow(path, O_CREAT | O_NONBLOCK | O_NOCTTY |
                                               (options.read_only ? O_RDONLY : O_RDWR)));
    SY_RETURN_IF_ERROR(RequireRegularFile(pair.buffered.get(), path));
  } else {
    SY_ASSIGN_OR_RETURN(
        pair.buffered, OpenRegularFile(path, (options.read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW));
  }
  if (options.truncate) SY_RETURN_IF_ERROR(FdTruncate(pair.buffered.get(), path, 0));
  if (!direct) return pair;
  int direct_flags = O_CLOEXEC | O_NOFOLLOW | O_DIRECT | (options.read_only ? O_RDONLY : O_RDWR);
  pair.direct = UniqueFd(::open(path.c_str(), direct_flags));
  if (!pair.direct.valid()) {
    int err = errno;
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      spdlog::warn(
          "O_DIRECT refused for {} ({}); using buffered I/O for files this file system cannot "
          "open directly. Put the store on a block-device file system (ext4, xfs) for direct I/O.",
          path, std::strerror(err));
    }
    if (err != EINVAL && err != EOPNOTSUPP) return ErrnoError("open O_DIRECT", path, err);
  }
  return pair;
}

Status PreadFull(int fd, const std::string& path, uint64_t offset, void* data, size_t length) {
  auto* out = static_cast<char*>(data);
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, out + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("pread", At(path, offset + done, length - done), errno);
    }
    if (n == 0) {
      return DataLossError("read " + At(path, offset, length) + " ran past end of file after " +
                           std::to_string(done) +
                           " bytes: the file is truncated or the offset is wrong");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PwriteFull(int fd, const std::string& path, uint64_t offset, const void* data,
                  size_t length) {
  const auto* in = static_cast<const char*>(data);
  size_t done = 0;
  while (done < length) {
    ssize_t n = ::pwrite(fd, in + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("pwrite", At(path, offset + done, length - done), errno);
    }
    if (n == 0) {
      return IOError("pwrite " + At(path, offset + done, length - done) + " wrote nothing");
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status RunOpOnPair(const FilePair& fds, const std::string& path, const IoOp& op) {
  bool read = op.kind == IoKind::kRead;
  if (fds.direct.valid() && IsDirectEligible(op.offset, op.data, op.length)) {
    return read ? PreadFull(fds.direct.get(), path, op.offset, op.data, op.length)
                : PwriteFull(fds.direct.get(), path, op.offset, op.data, op.length);
  }
  if (fds.direct.valid() && IsAligned(op.offset, kDirectAlignment) &&
      IsAligned(op.length, kDirectAlignment)) {
    size_t bounce_bytes = std::min(op.length, kBounceBytes);
    std::unique_ptr<void, FreeDeleter> bounce(std::aligned_alloc(kDirectAlignment, bounce_bytes));
    if (bounce == nullptr) {
      return ResourceExhaustedError("bounce buffer of " + std::to_string(bounce_bytes) +
                                    " bytes for " + path + ": out of memory");
    }
    auto* user = static_cast<char*>(op.data);
    for (size_t done = 0; done < op.length; done += bounce_bytes) {
      size_t n = std::min(bounce_bytes, op.length - done);
      if (read) {
        SY_RETURN_IF_ERROR(PreadFull(fds.direct.get(), path, op.offset + done, bounce.get(), n));
        std::memcpy(user + done, bounce.get(), n);
      } else {
        std::memcpy(bounce.get(), user + done, n);
        SY_RETURN_IF_ERROR(PwriteFull(fds.direct.get(), path, op.offset + done, bounce.get(), n));
      }
    }
    return Status::Ok();
  }
  return read ? PreadFull(fds.buffered.get(), path, op.offset, op.data, op.length)
              : PwriteFull(fds.buffered.get(), path, op.offset, op.data, op.length);
}

Status FdSync(int fd, const std::string& path) {
  for (;;) {
    if (::fdatasync(fd) == 0) return Status::Ok();
    if (errno != EINTR) return ErrnoError("fdatasync", path, errno);
  }
}

Status FdLockExclusive(int fd, const std::string& path, int64_t timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return Status::Ok();
    if (errno != EWOULDBLOCK && errno != EINTR) return ErrnoError("flock", path, errno);
    if (std::chrono::steady_clock::now() >= deadline) {
      return FailedPreconditionError(
          path +
          " is locked by another process (or by I/O a killed process left in flight); "
          "close it there first");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

Status FdTruncate(int fd, const std::string& path, uint64_t size) {
  for (;;) {
    if (::ftruncate(fd, static_cast<off_t>(size)) == 0) return Status::Ok();
    if (errno != EINTR) {
      return ErrnoError("ftruncate to " + std::to_string(size) + " bytes", path, errno);
    }
  }
}

Status FdPreallocate(int fd, const std::string& path, uint64_t size) {
  if (size == 0) return Status::Ok();
  int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (rc == 0) return Status::Ok();
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    SY_ASSIGN_OR_RETURN(uint64_t current, FdSize(fd, path));
    return current < size ? FdTruncate(fd, path, size) : Status::Ok();
  }
  return ErrnoError("fallocate " + std::to_string(size) + " bytes", path, rc);
}

Result<uint64_t> FdSize(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("fstat", path, errno);
  return static_cast<uint64_t>(st.st_size);
}

Status FilePairFile::Sync() { return FdSync(fds_.buffered.get(), path_); }
Status FilePairFile::Truncate(uint64_t size) {
  return FdTruncate(fds_.buffered.get(), path_, size);
}
Result<uint64_t> FilePairFile::Size() { return FdSize(fds_.buffered.get(), path_); }
Status FilePairFile::Preallocate(uint64_t size) {
  return FdPreallocate(fds_.buffered.get(), path_, size);
}
size_t FilePairFile::alignment() const { return fds_.direct.valid() ? kDirectAlignment : 1; }
Status FilePairFile::LockExclusive(int64_t timeout_ms) {
  const int fd = fds_.direct.valid() ? fds_.direct.get() : fds_.buffered.get();
  return FdLockExclusive(fd, path_, timeout_ms);
}

}  // namespace sy::storage
