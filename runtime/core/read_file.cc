#include "runtime/core/read_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/core/regular_file.h"

namespace sy {

Result<std::string> ReadFile(const std::string& path, size_t max_bytes, std::string_view what) {
  SY_ASSIGN_OR_RETURN(const UniqueFd fd, OpenRegularFile(path));
  auto too_large = [&] {
    std::string message = path + " is larger than " + std::to_string(max_bytes) + " bytes";
    if (!what.empty()) message += "; it is not " + std::string(what);
    return InvalidArgumentError(std::move(message));
  };
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat", path, errno);
  // st_size is only a hint (0 for /proc files, and the file may grow): read to the end.
  const auto hinted = static_cast<size_t>(st.st_size > 0 ? st.st_size : 0);
  if (hinted > max_bytes) return too_large();
  std::string bytes;
  bytes.reserve(hinted);
  char chunk[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd.get(), chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("read", path, errno);
    if (got == 0) break;
    if (static_cast<size_t>(got) > max_bytes - bytes.size()) return too_large();
    bytes.append(chunk, static_cast<size_t>(got));
  }
  return bytes;
}

}  // namespace sy
