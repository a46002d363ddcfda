#include "launcher/training/checkpoint_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace sy::launcher {
namespace {

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

// The holder's line ("pid 1234 host node7"), or "" when it has not written it yet.
std::string ReadHolder(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "";
  std::string line(text, static_cast<size_t>(n));
  while (!line.empty() && (line.back() == '\n' || line.back() == '\0')) line.pop_back();
  return line;
}

}  // namespace

std::string CheckpointDirLock::LockPath(const std::string& dir) {
  return (std::filesystem::path(dir) / "switchyard.lock").string();
}

Result<std::unique_ptr<CheckpointDirLock>> CheckpointDirLock::Acquire(const std::string& dir,
                                                                      std::string* warning) {
  warning->clear();
  const std::string path = LockPath(dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open the lock file of checkpoint.dir", path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      std::string holder = ReadHolder(fd);
      ::close(fd);
      if (holder.empty()) holder = "a process that is still starting";
      return FailedPreconditionError(
          "checkpoint.dir " + dir + " is in use by another training run (" + holder + ", " + path +
          "); wait for it to end, or set checkpoint.dir to another directory");
    }
    ::close(fd);
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
      *warning = "checkpoint.dir " + dir +
                 ": this file system has no file locks, so nothing stops a second run from "
                 "writing into it too";
      return std::unique_ptr<CheckpointDirLock>(new CheckpointDirLock(-1));
    }
    return ErrnoError("lock checkpoint.dir", path, err);
  }
  const std::string line = "pid " + std::to_string(::getpid()) + " on host " + HostName() + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("write the lock file of checkpoint.dir", path, err);
  }
  return std::unique_ptr<CheckpointDirLock>(new CheckpointDirLock(fd));
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sy::launcher
