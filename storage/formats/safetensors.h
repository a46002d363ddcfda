// Safetensors reader: Hugging Face's tensor file format, single files and sharded checkpoints.
//
// A file is: u64 little-endian N, then N bytes of UTF-8 JSON (the header, starting with '{' and
// possibly padded with trailing spaces), then the data buffer. The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data buffer); the key
// "__metadata__" holds a string -> string map. Every bound is checked as the reference
// implementation does (huggingface/safetensors, safetensors/src/tensor.rs):
//   - N <= kSafetensorsMaxHeaderBytes (100 MB) and 8 + N <= file size
//   - the header is valid JSON, starts with '{', has no duplicate keys, and is at most 64 deep
//   - every dtype is known, every shape entry is a non-negative integer, and
//     product(shape) * dtype size == end - begin, with no overflow
//   - sorted by offset, the tensors tile the data buffer exactly: the first begins at 0, each
//     begins where the previous ends (no overlap, no gap), and the last ends at the buffer's end
// A sharded checkpoint is a directory with model.safetensors.index.json, whose "weight_map" maps
// each tensor name to a shard file name. A shard name that is absolute or has a ".." component is
// rejected (it would escape the model directory); symlinks inside the directory are followed,
// since the Hugging Face hub cache links snapshot files to its blob store.
//
// Errors are Status values whose message names the file, the tensor and what to do.
//
// Ownership: SafetensorsFile owns its read-only memory map; views it returns (TensorBytes) are
// valid while it lives. SafetensorsCheckpoint owns its files. Thread-safety: after Open, both are
// immutable and may be read from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/mapped_file.h"
#include "runtime/core/status.h"

namespace sy::storage {

// The spec's cap on the JSON header (safetensors' MAX_HEADER_SIZE).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Every dtype the format names. Only kF32, kF16, kBF16 and kF64 convert to float.
enum class SafetensorsDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// "F32", "BF16", ... as the format spells them.
std::string_view SafetensorsDTypeName(SafetensorsDType dtype);
size_t SafetensorsDTypeSize(SafetensorsDType dtype);
// InvalidArgument naming the unknown dtype.
Result<SafetensorsDType> ParseSafetensorsDType(std::string_view name);

struct SafetensorsTensorInfo {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors;   // sorted by name
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
  uint64_t header_bytes = 0;                    // N
  uint64_t data_offset = 0;                     // 8 + N: where the data buffer starts
  const SafetensorsTensorInfo* Find(std::string_view name) const;
};

// Parses and validates the JSON header against a data buffer of `data_bytes` bytes. `file` names
// the file in error messages.
Result<SafetensorsHeader> ParseSafetensorsHeaderJson(std::string_view json, uint64_t data_bytes,
                                                     std::string_view file);
// Parses a whole file image (length prefix, header, data) without touching the data. This is the
// fuzz target's entry point.
Result<SafetensorsHeader> ParseSafetensorsImage(std::span<const uint8_t> image,
                                                std::string_view file);

// One tensor's bytes in a mapped file, in the file's dtype (little-endian, row-major).
struct TensorBytes {
  const SafetensorsTensorInfo* info = nullptr;
  std::span<const uint8_t> bytes;
  const std::string* file = nullptr;  // path of the file holding it
};

// Converts a tensor of dtype F32, F16, BF16 or F64 to f32 into `out` (out.size() == numel).
// InvalidArgument naming the tensor for any other dtype or a size mismatch.
Status ConvertToF32(const TensorBytes& tensor, std::span<float> out);

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header. NotFound / IOError from the OS, DataLoss or
  // InvalidArgument for a malformed file.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return map_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  // NotFound naming the file and the tensor.
  Result<TensorBytes> Get(std::string_view name) const;

 private:
  SafetensorsFile(MappedFile map, SafetensorsHeader header)
      : map_(std::move(map)), header_(std::move(header)) {}
  MappedFile map_;
  SafetensorsHeader header_;
};

// Validates a shard name from an index's weight_map: non-empty, relative, no ".." component, no
// NUL or backslash. InvalidArgument naming the index file, the tensor and the shard otherwise.
Status CheckShardName(std::string_view shard, std::string_view tensor, std::string_view index_file);

// Parses model.safetensors.index.json: the tensor name -> shard file map ("weight_map"), every
// shard name checked with CheckShardName.
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view json,
                                                                 std::string_view file);

class SafetensorsCheckpoint {
 public:
  // Opens `dir`/model.safetensors.index.json and its shards when the index exists, otherwise
  // `dir`/model.safetensors. Checks that every tensor of the weight map is in its shard, and that
  // no tensor appears in two files.
  static Result<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;
  bool Contains(std::string_view name) const { return where_.count(std::string(name)) > 0; }
  // NotFound naming the checkpoint and the tensor.
  Result<TensorBytes> Get(std::string_view name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

}  // namespace sy::storage
