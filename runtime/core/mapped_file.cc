#include "runtime/core/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "runtime/core/regular_file.h"

namespace sy {

Result<MappedFile> MappedFile::Open(const std::string& path) {
  SY_ASSIGN_OR_RETURN(const UniqueFd fd, OpenRegularFile(path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat", path, errno);
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) return MappedFile(path, nullptr, 0);
  // The mapping keeps the file open after the descriptor closes.
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (data == MAP_FAILED) return ErrnoError("mmap", path, errno);
  return MappedFile(path, static_cast<const uint8_t*>(data), size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace sy
