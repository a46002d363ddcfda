// MappedFile: a read-only memory mapping of a whole file, for the token and text datasets.
//
// Ownership: owns the mapping and unmaps it on destruction; move-only (copy deleted).
// Thread-safety: the bytes are immutable and may be read from any thread. Truncating the file
// while it is mapped makes reads past the new end fault (SIGBUS), as with any mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "runtime/core/status.h"

namespace sy {

class MappedFile {
 public:
  // NotFound naming the path when it does not exist; IOError for other failures. An empty file
  // maps to an empty span.
  static Result<MappedFile> Open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

  // A hash of the size and the first and last 64 KiB: cheap, and enough to tell a resumed run
  // that its data file was replaced.
  uint64_t SampleHash() const;

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Reset();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sy
