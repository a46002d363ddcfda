#include "launcher/training/directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <thread>

#include "runtime/core/file_creation.h"
#include "runtime/core/regular_file.h"

namespace sy::launcher {
namespace {

std::string HostName() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// The holder's line ("pid 1234 on host node7 since ..."), or "" when it has not written it yet.
std::string ReadHolder(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "";
  std::string line(text, static_cast<size_t>(n));
  while (!line.empty() && (line.back() == '\n' || line.back() == '\0')) line.pop_back();
  return line;
}

}  // namespace

std::string DirectoryLock::LockPath(const std::string& dir, const std::string& lock_file) {
  return (std::filesystem::path(dir) / lock_file).string();
}

Result<std::unique_ptr<DirectoryLock>> DirectoryLock::Acquire(const std::string& dir,
                                                              const DirectoryLockOptions& options,
                                                              std::string* warning) {
  warning->clear();
  const std::string path = LockPath(dir, options.lock_file);
  const std::string what = options.config_key + " " + dir;
  Result<UniqueFd> opened = OpenNoFollow(path, O_RDWR | O_CREAT | O_NONBLOCK);
  if (!opened.ok()) return opened.status().WithContext("the lock file of " + what);
  UniqueFd fd = std::move(*opened);
  SY_RETURN_IF_ERROR(RequireRegularFile(fd.get(), path).WithContext("the lock file of " + what));
  bool announced = false;
  for (;;) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) break;
    const int err = errno;
    if (err == EINTR) continue;
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
      *warning = what +
                 ": this file system has no file locks, so nothing stops a second run from "
                 "writing into it too";
      return std::unique_ptr<DirectoryLock>(new DirectoryLock(UniqueFd()));
    }
    if (err != EWOULDBLOCK) return ErrnoError("lock " + what, path, err);
    std::string holder = ReadHolder(fd.get());
    if (holder.empty()) holder = "a process that is still starting";
    const bool stopped = options.stop != nullptr && options.stop->load() != 0;
    if (!options.wait || stopped) {
      return FailedPreconditionError(
          what + " is locked by " + holder + " (" + path + ")" +
          (stopped ? "; stopped waiting for it"
                   : ": another run uses it; wait for it to end (or pass --wait-for-lock), "
                     "or set " +
                         options.config_key + " to another directory"));
    }
    if (!announced) {
      std::fprintf(options.out != nullptr ? options.out : stderr,
                   "%s is locked by %s (%s); waiting for it (--wait-for-lock)\n", what.c_str(),
                   holder.c_str(), path.c_str());
      std::fflush(options.out != nullptr ? options.out : stderr);
      announced = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const std::string line =
      "pid " + std::to_string(::getpid()) + " on host " + HostName() + " since " + UtcNow() + "\n";
  if (::ftruncate(fd.get(), 0) != 0 ||
      ::pwrite(fd.get(), line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    return ErrnoError("write the lock file of " + what, path, errno);
  }
  return std::unique_ptr<DirectoryLock>(new DirectoryLock(std::move(fd)));
}

}  // namespace sy::launcher
