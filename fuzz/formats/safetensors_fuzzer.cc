// libFuzzer target for the safetensors parsers (storage/formats/safetensors.h): any input must
// parse or give a Status. Whatever parses as a file image must satisfy the format's invariants
// (tensors tile the data buffer inside the image, shape x dtype size == byte length); whatever
// parses as an index must name only shards inside the model directory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "storage/formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sy::storage;
  sy::Result<SafetensorsHeader> header = ParseSafetensorsImage({data, size}, "fuzz");
  if (header.ok()) {
    const uint64_t data_bytes = size - header->data_offset;
    uint64_t total = 0;
    for (const SafetensorsTensorInfo& t : header->tensors) {
      if (t.end < t.begin || t.end > data_bytes) __builtin_trap();
      uint64_t bytes = SafetensorsDTypeSize(t.dtype);
      for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);
      if (bytes != t.end - t.begin) __builtin_trap();
      total += t.end - t.begin;
      if (header->Find(t.name) != &t) __builtin_trap();
    }
    if (total != data_bytes) __builtin_trap();
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = ParseSafetensorsIndex(text, "fuzz.index.json");
  if (index.ok()) {
    for (const auto& [tensor, shard] : *index) {
      if (shard.empty() || shard[0] == '/' || shard == ".." || shard.rfind("../", 0) == 0 ||
          shard.find("/../") != std::string_view::npos) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
