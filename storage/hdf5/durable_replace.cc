#include "storage/hdf5/durable_replace.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace sy {
namespace {

Status FsyncOpened(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoError(std::string("open ") + what + " to fsync", path, errno);
  int result;
  do {
    result = ::fsync(fd);
  } while (result != 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (result != 0) return ErrnoError(std::string("fsync ") + what, path, err);
  return Status::Ok();
}

// The pid of a name TemporaryPathFor makes ("x.tmp.1234" -> 1234), or -1.
pid_t TemporaryFileOwner(const std::string& name) {
  const size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return -1;
  const std::string digits = name.substr(at + 5);
  if (digits.empty() || digits.size() > 9) return -1;
  pid_t pid = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    pid = pid * 10 + (c - '0');
  }
  return pid > 0 ? pid : -1;
}

// Whether `name` is a temporary TemporaryPathFor made in a process that is gone from this machine
// (kill(pid, 0) fails with ESRCH; EPERM means it exists under another user).
bool OwnerIsGone(const std::string& name) {
  const pid_t pid = TemporaryFileOwner(name);
  if (pid < 0 || pid == ::getpid()) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

Status FsyncFile(const std::string& path) { return FsyncOpened(path, O_RDONLY, "file"); }

Status FsyncParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string directory = slash == std::string::npos ? "." : path.substr(0, slash);
  if (directory.empty()) directory = "/";
  return FsyncOpened(directory, O_RDONLY | O_DIRECTORY, "directory");
}

Status DurablyReplace(const std::string& temp_path, const std::string& final_path, bool* renamed) {
  if (renamed != nullptr) *renamed = false;
  SY_RETURN_IF_ERROR(FsyncFile(temp_path));
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    return ErrnoError("rename " + temp_path + " over", final_path, errno);
  }
  if (renamed != nullptr) *renamed = true;
  return FsyncParentDirectoryAfterRename(final_path);
}

Status FsyncParentDirectoryAfterRename(const std::string& final_path) {
  return FsyncParentDirectory(final_path)
      .WithContext(final_path +
                   " is complete under its name, but a power cut may still undo the rename");
}

std::string TemporaryPathFor(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

Result<std::vector<std::string>> RemoveStaleTemporaryFiles(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return IOError("list " + dir + " for stale temporary files: " + ec.message());
  for (const std::filesystem::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || !OwnerIsGone(name)) continue;
    const std::string path = entry.path().string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError("remove stale temporary file", path, errno);
    }
    removed.push_back(path);
  }
  return removed;
}

Result<std::vector<std::string>> RemoveStaleTemporariesOf(const std::string& final_path) {
  const std::filesystem::path target(final_path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string prefix = target.filename().string() + ".tmp.";
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return removed;  // no directory yet: nothing was staged there
  for (const std::filesystem::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.rfind(".tmp.") != prefix.size() - 5 || !OwnerIsGone(name)) {
      continue;
    }
    const std::string path = entry.path().string();
    std::filesystem::remove_all(entry.path(), ec);
    if (ec) return IOError("remove stale temporary " + path + ": " + ec.message());
    removed.push_back(path);
  }
  return removed;
}

}  // namespace sy
