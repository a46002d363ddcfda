// Checksums for extents and store metadata: CRC-32C (Castagnoli; SSE4.2 instruction when the
// build targets it, a table otherwise) and XXH3-64 (libxxhash, when found at configure time).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/core/status.h"

namespace sy::storage {

// Stored in the superblock; values are part of the on-disk format.
enum class ChecksumKind : uint32_t { kCrc32c = 1, kXxh3 = 2 };

std::string_view ChecksumKindName(ChecksumKind kind);
Result<ChecksumKind> ParseChecksumKind(std::string_view name);  // "crc32c" or "xxh3"
// Whether this build can compute `kind` (xxh3 needs libxxhash).
bool ChecksumAvailable(ChecksumKind kind);

// CRC-32C of `data`, continuing from `crc` (0 for a fresh one). Crc32c("123456789") = 0xE3069283.
// With SSE4.2, buffers of 768 bytes or more run as three interleaved instruction chains joined by
// a shift over zero bytes (about three times one chain's speed on long extents).
uint32_t Crc32c(const void* data, size_t length, uint32_t crc = 0);

// The checksum of `data` under `kind`, seeded with `seed` (crc32c: the low 32 bits are the initial
// CRC). Aborts for a kind that is not ChecksumAvailable: callers check when opening a store.
uint64_t ComputeChecksum(ChecksumKind kind, uint64_t seed, const void* data, size_t length);

namespace internal {
// The table-driven CRC-32C, kept beside the hardware one as its reference.
uint32_t Crc32cPortable(const void* data, size_t length, uint32_t crc = 0);
// One instruction chain (Crc32c's tail, and the baseline its benchmark compares against); the
// table without SSE4.2.
uint32_t Crc32cOneStream(const void* data, size_t length, uint32_t crc = 0);
}  // namespace internal

}  // namespace sy::storage
