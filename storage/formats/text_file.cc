#include "storage/formats/text_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace sy::storage {

Result<std::string> ReadTextFile(const std::string& path, size_t max_bytes,
                                 const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError(path + " does not exist");
    return ErrnoError("open", path, err);
  }
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoError("read", path, err);
    }
    if (got == 0) break;
    text.append(buf, static_cast<size_t>(got));
    if (text.size() > max_bytes) {
      ::close(fd);
      return InvalidArgumentError(path + " is larger than " + std::to_string(max_bytes) +
                                  " bytes; it is not " + what);
    }
  }
  ::close(fd);
  return text;
}

}  // namespace sy::storage
