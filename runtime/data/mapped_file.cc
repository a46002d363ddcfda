#include "runtime/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "runtime/data/sample_rng.h"

namespace sy {

Result<MappedFile> MappedFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return NotFoundError("data file " + path + ": not found; check data.path");
    }
    return ErrnoError("open data file", path, err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("stat data file", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError("data file " + path + ": not a regular file; check data.path");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return MappedFile(path, nullptr, 0);
  }
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (data == MAP_FAILED) return ErrnoError("mmap data file", path, err);
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

uint64_t MappedFile::SampleHash() const {
  constexpr size_t kEdge = 64 << 10;
  const std::span<const uint8_t> all = bytes();
  uint64_t h = MixSeed(0x66696c65ull, all.size());
  auto absorb = [&h](std::span<const uint8_t> part) {
    for (size_t i = 0; i < part.size(); i += 8) {
      uint64_t word = 0;
      for (size_t j = 0; j < 8 && i + j < part.size(); ++j) {
        word |= static_cast<uint64_t>(part[i + j]) << (8 * j);
      }
      h = MixSeed(h, word);
    }
  };
  absorb(all.first(std::min(kEdge, all.size())));
  if (all.size() > kEdge) absorb(all.last(std::min(kEdge, all.size() - kEdge)));
  return h;
}

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace sy
