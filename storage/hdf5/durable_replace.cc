#include "storage/hdf5/durable_replace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

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

}  // namespace

Status FsyncFile(const std::string& path) { return FsyncOpened(path, O_RDONLY, "file"); }

Status FsyncParentDirectory(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string directory = slash == std::string::npos ? "." : path.substr(0, slash);
  if (directory.empty()) directory = "/";
  return FsyncOpened(directory, O_RDONLY | O_DIRECTORY, "directory");
}

Status DurablyReplace(const std::string& temp_path, const std::string& final_path) {
  SY_RETURN_IF_ERROR(FsyncFile(temp_path));
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    return ErrnoError("rename " + temp_path + " over", final_path, errno);
  }
  return FsyncParentDirectory(final_path);
}

std::string TemporaryPathFor(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

}  // namespace sy
