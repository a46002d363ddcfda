// libFuzzer target for the expert store's superblock and index parser (storage/store/store_format.h).
//
// Each input is a store image. It is parsed as it is, and again after ResealImage recomputes its
// checksums, so that mutations also reach the structural checks that sit behind the CRCs (a
// random mutation almost never keeps a CRC valid). Any crash, sanitizer report or hang is a bug:
// malformed images must come back as a Status.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "storage/store/store_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sy::storage;
  std::span<const uint8_t> input(data, size);
  sy::Result<StoreMetadata> raw = ParseStoreImage(input);
  if (raw.ok() && raw->entries.size() != raw->superblock.num_entries()) __builtin_trap();

  std::vector<uint8_t> image(data, data + size);
  internal::ResealImage(image);
  sy::Result<StoreMetadata> resealed = ParseStoreImage(image);
  if (resealed.ok()) {
    const Superblock& sb = resealed->superblock;
    if (resealed->entries.size() != sb.num_entries()) __builtin_trap();
    // Every extent the parser accepted lies inside the image and inside its kind's pool.
    for (const IndexEntry& entry : resealed->entries) {
      if (entry.generation == 0) continue;
      const KindInfo& kind = sb.kinds.at(entry.kind_index);
      if (entry.offset + kind.stride > size || entry.offset < kind.pool_offset) __builtin_trap();
    }
  }
  return 0;
}
