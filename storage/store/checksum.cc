#include "storage/store/checksum.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif
#if SY_STORAGE_HAVE_XXHASH
#include <xxhash.h>
#endif

#include "runtime/core/check.h"

namespace sy::storage {
namespace {

constexpr uint32_t kCrc32cPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kCrc32cPoly : 0u);
    table[i] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

}  // namespace

std::string_view ChecksumKindName(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kCrc32c:
      return "crc32c";
    case ChecksumKind::kXxh3:
      return "xxh3";
  }
  return "unknown";
}

Result<ChecksumKind> ParseChecksumKind(std::string_view name) {
  if (name == "crc32c") return ChecksumKind::kCrc32c;
  if (name == "xxh3") return ChecksumKind::kXxh3;
  return InvalidArgumentError("unknown checksum '" + std::string(name) +
                              "': expected crc32c or xxh3");
}

bool ChecksumAvailable(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kCrc32c:
      return true;
    case ChecksumKind::kXxh3:
      return SY_STORAGE_HAVE_XXHASH != 0;
  }
  return false;
}

uint32_t Crc32c(const void* data, size_t length, uint32_t crc) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t crc64 = ~crc;
  while (length >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc64 = _mm_crc32_u64(crc64, word);
    p += 8;
    length -= 8;
  }
  auto crc32 = static_cast<uint32_t>(crc64);
  while (length > 0) {
    crc32 = _mm_crc32_u8(crc32, *p++);
    --length;
  }
  return ~crc32;
#else
  return internal::Crc32cPortable(data, length, crc);
#endif
}

namespace internal {

uint32_t Crc32cPortable(const void* data, size_t length, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  while (length > 0) {
    crc = kCrcTable[(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    --length;
  }
  return ~crc;
}

}  // namespace internal

uint64_t ComputeChecksum(ChecksumKind kind, uint64_t seed, const void* data, size_t length) {
  switch (kind) {
    case ChecksumKind::kCrc32c:
      return Crc32c(data, length, static_cast<uint32_t>(seed));
    case ChecksumKind::kXxh3:
#if SY_STORAGE_HAVE_XXHASH
      return XXH3_64bits_withSeed(data, length, seed);
#else
      SY_CHECK(false) << "xxh3 checksum requested in a build without libxxhash";
      return 0;
#endif
  }
  SY_CHECK(false) << "unknown checksum kind " << static_cast<uint32_t>(kind);
  return 0;
}

}  // namespace sy::storage
