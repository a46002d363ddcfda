#include "storage/hdf5/durable_replace.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

// Whether `name` is a temporary TemporaryPathFor made in a process that is gone from this machine
// (kill(pid, 0) fails with ESRCH; EPERM means it exists under another user).
bool OwnerIsGone(const std::string& name) {
  const pid_t pid = TemporaryPathOwner(name);
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

Status DurablyPlaceNew(const std::string& temp_path, const std::string& final_path, bool* renamed) {
  if (renamed != nullptr) *renamed = false;
  SY_RETURN_IF_ERROR(FsyncFile(temp_path));
  SY_RETURN_IF_ERROR(RenameNoReplace(temp_path, final_path));
  if (renamed != nullptr) *renamed = true;
  return FsyncParentDirectoryAfterRename(final_path);
}

Status FsyncParentDirectoryAfterRename(const std::string& final_path) {
  return FsyncParentDirectory(final_path)
      .WithContext(final_path +
                   " is complete under its name, but a power cut may still undo the rename");
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
    // TemporaryPathFor(final_path)'s names only: "<name>.tmp.<pid>[.<hex>]", nothing more.
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        std::count(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(), '.') >
            1 ||
        TemporaryPathOwner(name) < 0 || !OwnerIsGone(name)) {
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
