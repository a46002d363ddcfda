#include "runtime/core/file_creation.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "runtime/core/regular_file.h"
#include "runtime/core/temporary_cleanup.h"

namespace sy {
namespace {

uint64_t RandomBits() {
  uint64_t bits = 0;
  auto* out = reinterpret_cast<char*>(&bits);
  size_t done = 0;
  while (done < sizeof(bits)) {
    const ssize_t n = ::getrandom(out + done, sizeof(bits) - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // no entropy source: the O_EXCL creation still keeps the name safe
    done += static_cast<size_t>(n);
  }
  return bits;
}

bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool AllHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return !s.empty();
}

}  // namespace

std::string TemporaryPathFor(const std::string& path) {
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t bits = RandomBits();
  std::string suffix(16, '0');
  for (char& c : suffix) {
    c = kHex[bits & 15];
    bits >>= 4;
  }
  return path + ".tmp." + std::to_string(::getpid()) + "." + suffix;
}

pid_t TemporaryPathOwner(std::string_view name) {
  // "x.tmp.<pid>.<hex>", or the older "x.tmp.<pid>"; the hex part holds no ".tmp.".
  const size_t at = name.rfind(".tmp.");
  if (at == std::string_view::npos || at == 0) return -1;
  const std::string_view rest = name.substr(at + 5);
  const size_t dot = rest.find('.');
  const std::string_view digits = rest.substr(0, dot);
  if (!AllDigits(digits) || (dot != std::string_view::npos && !AllHex(rest.substr(dot + 1)))) {
    return -1;
  }
  pid_t pid = 0;
  for (char c : digits) pid = pid * 10 + (c - '0');
  return pid > 0 ? pid : -1;
}

Status CreationError(std::string_view op, const std::string& path, int err) {
  if (err == EEXIST || err == ELOOP) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) return SymbolicLinkRefusal(path);
    if (err == EEXIST) return AlreadyExistsError(path + " exists");
  }
  return ErrnoError(op, path, err);
}

Result<UniqueFd> CreateNewFile(const std::string& path, mode_t mode, bool read_write) {
  UniqueFd fd(::open(path.c_str(),
                     (read_write ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     mode));
  if (!fd.valid()) return CreationError("create", path, errno);
  return fd;
}

Status CreateNewDirectory(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) return CreationError("create directory", path, errno);
  return Status::Ok();
}

Result<UniqueFd> OpenNoFollow(const std::string& path, int flags, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) return CreationError("open", path, errno);
  return fd;
}

Result<UniqueFd> OpenForAppend(const std::string& path) {
  SY_ASSIGN_OR_RETURN(UniqueFd fd, OpenNoFollow(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK));
  SY_RETURN_IF_ERROR(RequireRegularFile(fd.get(), path));
  return fd;
}

Status WriteAll(int fd, const std::string& path, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write", path, errno);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status RenameNoReplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    return Status::Ok();
  }
  const int err = errno;
  if (err != EINVAL && err != ENOSYS && err != EOPNOTSUPP) {
    return CreationError("rename " + from + " to", to, err);
  }
  // A file system without RENAME_NOREPLACE (some network file systems). A file: link() never
  // replaces. A directory: only a check before the rename is possible.
  struct stat st {};
  if (::lstat(from.c_str(), &st) != 0) return ErrnoError("stat", from, errno);
  if (!S_ISDIR(st.st_mode)) {
    if (::link(from.c_str(), to.c_str()) != 0) {
      return CreationError("link " + from + " to", to, errno);
    }
    if (::unlink(from.c_str()) != 0) return ErrnoError("unlink", from, errno);
    return Status::Ok();
  }
  if (::lstat(to.c_str(), &st) == 0) return CreationError("rename " + from + " to", to, EEXIST);
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return CreationError("rename " + from + " to", to, errno);
  }
  return Status::Ok();
}

Status WriteFileReplacing(const std::string& path, std::string_view bytes) {
  ScopedTemporary temp(TemporaryPathFor(path));
  SY_ASSIGN_OR_RETURN(const UniqueFd fd, CreateNewFile(temp.path()));
  SY_RETURN_IF_ERROR(WriteAll(fd.get(), temp.path(), bytes));
  if (::fdatasync(fd.get()) != 0) return ErrnoError("fdatasync", temp.path(), errno);
  if (::rename(temp.path().c_str(), path.c_str()) != 0) {
    return ErrnoError("rename " + temp.path() + " to", path, errno);
  }
  temp.Release();
  return Status::Ok();
}

}  // namespace sy
