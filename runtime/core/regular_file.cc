#include "runtime/core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <unistd.h>

#include <cerrno>

namespace sy {

std::string_view FileKindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a file";
}

namespace {

// " (to <target>)" for the symbolic link `path`, or "" when it cannot be read.
std::string LinkTarget(const std::string& path) {
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
  return n > 0 ? " (to " + std::string(target, static_cast<size_t>(n)) + ")" : "";
}

}  // namespace

Status SymbolicLinkRefusal(const std::string& path) {
  return FailedPreconditionError(path + " is a symbolic link" + LinkTarget(path) +
                                 "; refusing to follow it: remove it or choose another path");
}

Result<UniqueFd> OpenRegularFile(const std::string& path, int flags) {
  // O_NONBLOCK: an open of a FIFO returns at once instead of waiting for a writer; O_NOCTTY: a
  // terminal never becomes the controlling one.
  UniqueFd fd(::open(path.c_str(), flags | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    struct stat st {};
    if (err == ELOOP && (flags & O_NOFOLLOW) != 0 && ::lstat(path.c_str(), &st) == 0 &&
        S_ISLNK(st.st_mode)) {
      return SymbolicLinkRefusal(path);
    }
    if (err == ENOENT) {
      if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        return NotFoundError(path + " is a dangling symbolic link" + LinkTarget(path));
      }
      return NotFoundError(path + " does not exist");
    }
    // A socket cannot be opened at all (ENXIO); say what it is.
    if (err == ENXIO && ::stat(path.c_str(), &st) == 0) {
      return InvalidArgumentError(path + " is " + std::string(FileKindName(st.st_mode)) +
                                  ", not a regular file");
    }
    return ErrnoError("open", path, err);
  }
  SY_RETURN_IF_ERROR(RequireRegularFile(fd.get(), path));
  return fd;
}

Status RequireRegularFile(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgumentError(path + " is " + std::string(FileKindName(st.st_mode)) +
                                ", not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoError("fcntl", path, errno);
  }
  return Status::Ok();
}

Status CheckRegularFile(const std::string& path) {
  Result<UniqueFd> fd = OpenRegularFile(path);
  return fd.status();
}

}  // namespace sy
