// MappedFile: a read-only memory mapping of a whole file, the one file mapping Switchyard reads
// through (the token and text datasets, safetensors shards). For a small file read whole into
// memory, use ReadFile (runtime/core/read_file.h).
//
// Ownership: owns the mapping and unmaps it on destruction; move-only (copy deleted). The file
// descriptor is closed once the mapping exists.
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
  // Maps all of `path` (MAP_PRIVATE, PROT_READ). NotFound "<path> does not exist";
  // InvalidArgument "<path> is a directory, not a regular file" (a FIFO, a device: nothing blocks
  // on them, runtime/core/regular_file.h); IOError naming the failed call. An empty
  // file maps to an empty span.
  static Result<MappedFile> Open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Reset();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sy
