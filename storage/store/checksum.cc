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

#if defined(__SSE4_2__)
namespace {

// The CRC-32C instruction has a latency of three cycles and a throughput of one a cycle, so one
// dependent chain runs at a third of its speed. A long buffer is taken three strides at a time,
// each stride's CRC computed in its own chain (the second and third from a zero register), and
// the three joined: the register after A then B is the register after A shifted over |B| zero
// bytes, xor the register after B from zero (the CRC is linear over GF(2)). The shift over a
// fixed number of zero bytes is linear too: four 256-entry tables, one per byte of the register.
template <size_t kStride>
class ZeroShift {
 public:
  ZeroShift() {
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) {
      uint64_t reg = uint64_t{1} << bit;
      for (size_t i = 0; i < kStride / 8; ++i) reg = _mm_crc32_u64(reg, 0);
      basis[bit] = static_cast<uint32_t>(reg);
    }
    for (int byte = 0; byte < 4; ++byte) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t shifted = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if ((v >> bit) & 1u) shifted ^= basis[8 * byte + bit];
        }
        table_[byte][v] = shifted;
      }
    }
  }
  // The register `reg` after kStride zero bytes.
  uint32_t operator()(uint32_t reg) const {
    return table_[0][reg & 0xFFu] ^ table_[1][(reg >> 8) & 0xFFu] ^ table_[2][(reg >> 16) & 0xFFu] ^
           table_[3][reg >> 24];
  }

 private:
  uint32_t table_[4][256];
};

uint64_t Word(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

// Consumes whole groups of three strides from p, updating the register `reg`.
template <size_t kStride>
uint64_t ThreeStreams(const uint8_t*& p, size_t& length, uint64_t reg) {
  static const ZeroShift<kStride> shift;  // built once, thread-safe (a function-local static)
  while (length >= 3 * kStride) {
    uint64_t reg1 = 0, reg2 = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      reg = _mm_crc32_u64(reg, Word(p + i));
      reg1 = _mm_crc32_u64(reg1, Word(p + kStride + i));
      reg2 = _mm_crc32_u64(reg2, Word(p + 2 * kStride + i));
    }
    reg = shift(static_cast<uint32_t>(reg)) ^ static_cast<uint32_t>(reg1);
    reg = shift(static_cast<uint32_t>(reg)) ^ static_cast<uint32_t>(reg2);
    p += 3 * kStride;
    length -= 3 * kStride;
  }
  return reg;
}

}  // namespace
#endif

uint32_t Crc32c(const void* data, size_t length, uint32_t crc) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t reg = ~crc;
  reg = ThreeStreams<8192>(p, length, reg);
  reg = ThreeStreams<256>(p, length, reg);
  return internal::Crc32cOneStream(p, length, ~static_cast<uint32_t>(reg));
#else
  return internal::Crc32cPortable(data, length, crc);
#endif
}

namespace internal {

uint32_t Crc32cOneStream(const void* data, size_t length, uint32_t crc) {
#if defined(__SSE4_2__)
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t reg = ~crc;
  for (; length >= 8; p += 8, length -= 8) reg = _mm_crc32_u64(reg, Word(p));
  auto reg32 = static_cast<uint32_t>(reg);
  for (; length > 0; --length) reg32 = _mm_crc32_u8(reg32, *p++);
  return ~reg32;
#else
  return Crc32cPortable(data, length, crc);
#endif
}

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
