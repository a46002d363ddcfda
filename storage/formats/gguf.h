// GGUF reader: llama.cpp's model container (ggml's gguf.cpp, gguf-py's gguf_reader.py), version 3.
//
// A file is, all little-endian:
//   u32 magic "GGUF", u32 version (3), u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value type, value },
//   tensor_count x { string name, u32 n_dims, n_dims x u64 ne, u32 ggml type, u64 offset },
//   padding to general.alignment (default 32), then the data section.
// A string is u64 length + bytes (no NUL); an array is u32 element type + u64 count + elements.
// ne[0] is the innermost (contiguous) dimension: a PyTorch [out, in] weight has ne = {in, out}.
// Offsets are relative to the data section and, as ggml's reader requires, tensor i starts where
// tensor i - 1's bytes end rounded up to the alignment (the first at 0).
//
// Every bound is checked (ggml/src/gguf.cpp does the same checks):
//   - magic, version 3, counts that fit the file (each KV and tensor info takes bytes)
//   - every string and array length against the bytes left, with no overflow; no nested arrays;
//     at most kGgufMaxArrayElements array elements in all
//   - keys unique, tensor names unique and at most 63 bytes, n_dims in [1, 4], every ne >= 0
//   - the tensor type is one ggml defines, ne[0] is a multiple of its block size, and
//     product(ne) / block * type size fits in u64 (overflow-checked)
//   - general.alignment, when present, is a u32 power of two
//   - offsets as above, and every tensor's bytes lie inside the file
// Errors are Status values naming the file and the key or tensor, and what to do.
//
// Ownership: GgufFile owns its read-only memory map; tensor byte spans it returns are valid while
// it lives. GgufValue and GgufHeader are value types. Thread-safety: after Open a GgufFile is
// immutable and may be read from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/mapped_file.h"
#include "runtime/core/status.h"

namespace sy::storage {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr size_t kGgufMaxDims = 4;              // GGML_MAX_DIMS
inline constexpr size_t kGgufMaxTensorNameBytes = 63;  // GGML_MAX_NAME - 1
// Metadata array elements per file, all arrays together (a 256k-token vocabulary's tokens, scores,
// types and merges are about 1M).
inline constexpr uint64_t kGgufMaxArrayElements = 1ull << 24;

// The metadata value types (gguf_type). The numbers are the file's.
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType type);  // "u32", "string", "array", ...

// The tensor types (ggml_type) that exist in files today. The numbers are the file's; gaps are
// types ggml removed.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
};
// Name as ggml spells it ("F32", "Q8_0", ...); InvalidArgument for a number ggml does not define.
std::string_view GgmlTypeName(GgmlType type);
Result<GgmlType> GgmlTypeFromNumber(uint32_t number);
// Elements per block (1 for the plain types, 32 or 256 for the quantized ones) and bytes per block.
int64_t GgmlBlockSize(GgmlType type);
int64_t GgmlTypeSize(GgmlType type);

// Bytes of a tensor of `type` with dims `ne` (ggml order): ne[0] / block * type size * ne[1] *
// ... InvalidArgument naming `name` when ne[0] is not a multiple of the block size, a dimension
// is negative, or the size or element count overflows.
Result<uint64_t> GgufTensorBytes(GgmlType type, std::span<const int64_t> ne, std::string_view name);

// One metadata value. Scalars hold their value in the member of their kind (integers of every
// width in `u` or `i`, f32 and f64 in `f`, which holds an f32 exactly); arrays hold `array_type`
// and their elements, each a scalar of that type.
struct GgufValue {
  GgufValueType type = GgufValueType::kU32;
  uint64_t u = 0;                                 // kU8, kU16, kU32, kU64
  int64_t i = 0;                                  // kI8, kI16, kI32, kI64
  double f = 0;                                   // kF32, kF64
  bool b = false;                                 // kBool
  std::string s;                                  // kString
  GgufValueType array_type = GgufValueType::kU8;  // kArray: the element type
  std::vector<GgufValue> array;                   // kArray: the elements

  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue U64(uint64_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  // An array of `element_type`; every element must be a scalar of that type.
  static GgufValue Array(GgufValueType element_type, std::vector<GgufValue> elements);

  bool is_unsigned() const;
  bool is_signed() const;
  bool is_float() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64; }
  // Any integer type holding a value >= 0.
  bool AsUint(uint64_t* out) const;
  // Any integer or float type.
  bool AsDouble(double* out) const;
  // "u32 7", "string \"llama\"", "array of 32000 string": for messages and dumps.
  std::string Describe() const;
  bool operator==(const GgufValue& other) const;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // ggml order: ne[0] innermost
  uint64_t offset = 0;      // relative to the data section
  uint64_t bytes = 0;       // product(ne) / block size * type size
  int64_t numel() const;
  // The row-major (PyTorch / numpy) shape: ne reversed.
  std::vector<int64_t> shape() const;
};

struct GgufHeader {
  uint32_t version = kGgufVersion;
  std::vector<GgufKeyValue> metadata;   // in file order
  std::vector<GgufTensorInfo> tensors;  // in file order
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // where the data section starts in the file

  const GgufValue* Find(std::string_view key) const;
  const GgufTensorInfo* FindTensor(std::string_view name) const;
};

// Parses and validates a whole file image (header, tensor infos; data bounds against the image
// size) without reading tensor data. This is the fuzz target's entry point. `file` names the file
// in error messages.
Result<GgufHeader> ParseGgufImage(std::span<const uint8_t> image, std::string_view file);

class GgufFile {
 public:
  // Maps `path` read-only and validates it. NotFound / IOError from the OS, InvalidArgument for a
  // malformed file.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return map_.path(); }
  const GgufHeader& header() const { return header_; }
  // The bytes of a tensor of this file (info from header().tensors).
  std::span<const uint8_t> Data(const GgufTensorInfo& info) const;
  // NotFound naming the file and the tensor.
  Result<const GgufTensorInfo*> Tensor(std::string_view name) const;

 private:
  GgufFile(MappedFile map, GgufHeader header) : map_(std::move(map)), header_(std::move(header)) {}
  MappedFile map_;
  GgufHeader header_;
};

}  // namespace sy::storage
