// The expert store's on-disk format: superblock, index and extent layout, and the parser that
// validates them. docs/storage.md describes the format byte by byte and argues crash consistency.
//
//   [0, 4 KiB)        superblock slot 0      the two slots alternate: publish number N goes to
//   [4 KiB, 8 KiB)    superblock slot 1      slot N % 2, so the other slot keeps publish N-1
//   index area 0, index area 1               publish N writes its index to area N % 2
//   extent pools, one per extent kind        (layers * experts + spare) extents of one stride
//
// A superblock holds the magic, the format version, the layout (layers, experts, the extent kinds
// with their part sizes, the pools) and the location and checksum of its index. The index has one
// entry per (layer, expert, kind) in that order: {offset, length, checksum, generation}. Extents
// are 4 KiB-aligned; an expert's state of one kind is one contiguous extent.
//
// Everything here is a pure function of bytes: the parsers never touch a file, so the fuzzer
// (fuzz/storage/) can drive them directly. Malformed input gives a Status, never a crash:
//   InvalidArgument  not an expert store (wrong magic)
//   Unimplemented    a format version this build does not read
//   DataLoss         a checksum mismatch, a truncated file, a field out of range, an index entry
//                    pointing past the end of the file or at another entry's extent
//
// Thread-safety: pure functions and values.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "storage/store/checksum.h"

namespace sy::storage {

inline constexpr char kStoreMagic[8] = {'S', 'Y', 'X', 'S', 'T', 'O', 'R', 'E'};
inline constexpr uint32_t kStoreVersion = 1;
inline constexpr uint64_t kStoreBlock = 4096;  // superblock size and extent alignment
inline constexpr uint32_t kMaxKinds = 4;
inline constexpr uint32_t kMaxParts = 8;
inline constexpr uint32_t kMaxLayers = 1u << 16;
inline constexpr uint32_t kMaxExperts = 1u << 16;
inline constexpr uint64_t kIndexEntryBytes = 48;

// What an extent holds. Values are part of the on-disk format.
enum class ExtentKind : uint32_t {
  kWeights = 1,     // inference: gate | up | down in the compute dtype
  kTrainState = 2,  // training: fp32 master | m | v
};
std::string ExtentKindName(ExtentKind kind);

// One extent kind as the caller asks for it.
struct KindSpec {
  ExtentKind kind = ExtentKind::kWeights;
  std::vector<uint64_t> part_bytes;  // e.g. {gate, up, down} in bytes; 1..8 parts
  // Extents beyond one per expert, for out-of-place updates. Updates in flight at once (a
  // write-back batch) need this many; 0 makes the kind read-only. Default: one per expert.
  int64_t spare_extents = -1;
};

struct StoreLayout {
  uint32_t num_layers = 0;
  uint32_t num_experts = 0;
  ChecksumKind checksum = ChecksumKind::kCrc32c;
  std::vector<KindSpec> kinds;
};

// A kind as laid out in the file.
struct KindInfo {
  ExtentKind kind = ExtentKind::kWeights;
  std::vector<uint64_t> part_bytes;
  uint64_t payload_bytes = 0;  // sum of the parts: what the checksum covers
  uint64_t stride = 0;         // payload rounded up to 4 KiB: the extent size on disk
  uint64_t pool_offset = 0;
  uint64_t pool_extents = 0;
};

struct Superblock {
  uint32_t version = kStoreVersion;
  uint64_t sequence = 0;  // publish number; the newer valid slot wins
  ChecksumKind checksum = ChecksumKind::kCrc32c;
  uint32_t num_layers = 0;
  uint32_t num_experts = 0;
  std::vector<KindInfo> kinds;
  std::array<uint64_t, 2> index_area_offset{};
  uint64_t index_area_bytes = 0;
  uint64_t index_bytes = 0;     // entries * 48
  uint64_t index_checksum = 0;  // crc32c of the index bytes
  uint64_t data_offset = 0;
  uint64_t file_bytes = 0;

  uint64_t num_entries() const {
    return uint64_t{num_layers} * num_experts * static_cast<uint64_t>(kinds.size());
  }
  // Position of (layer, expert, kind_index) in the index.
  uint64_t EntryIndex(uint32_t layer, uint32_t expert, uint32_t kind_index) const {
    return (uint64_t{layer} * num_experts + expert) * kinds.size() + kind_index;
  }
};

struct IndexEntry {
  uint32_t layer = 0;
  uint32_t expert = 0;
  uint32_t kind_index = 0;
  uint64_t offset = 0;  // 0 when never written
  uint64_t length = 0;  // payload bytes
  uint64_t checksum = 0;
  uint64_t generation = 0;  // 0: never written; each update adds 1
};

// What Open reads back: the chosen superblock (and its slot) with its index.
struct StoreMetadata {
  Superblock superblock;
  int slot = 0;
  std::vector<IndexEntry> entries;
  // Why the other slot was not chosen ("" when it was valid but older).
  std::string other_slot_note;
  // The publish before it (sequence - 1), when its superblock and index are still valid. The
  // store falls back to it when the newest publish was interrupted: a publish makes its extents,
  // index and superblock durable with one fdatasync, so after a crash the newest superblock may
  // be on disk while one of its new extents is not (docs/storage.md).
  bool has_previous = false;
  Superblock previous_superblock;
  int previous_slot = 0;
  std::vector<IndexEntry> previous_entries;
};

// Lays out a new store: offsets of the index areas and pools, and the file size. Sequence 0.
Result<Superblock> PlanLayout(const StoreLayout& layout);

std::array<uint8_t, kStoreBlock> EncodeSuperblock(const Superblock& superblock);
Result<Superblock> ParseSuperblock(std::span<const uint8_t> bytes);

// The index bytes for `entries` (which must be complete and in order), padded to 4 KiB.
std::vector<uint8_t> EncodeIndex(const Superblock& superblock,
                                 const std::vector<IndexEntry>& entries);
// Validates the index against its superblock and the real file size.
Result<std::vector<IndexEntry>> ParseIndex(const Superblock& superblock,
                                           std::span<const uint8_t> bytes, uint64_t file_size);

// Picks the newest superblock whose index is valid. `read_index(superblock)` returns the bytes
// of that superblock's index area (a view into a file image, or a read from the file); its
// DataLoss marks the slot invalid, any other error (a failed read) is returned as it is, since an
// I/O error is no evidence that the newer slot is bad.
using ReadIndexFn = std::function<Result<std::vector<uint8_t>>(const Superblock&)>;
Result<StoreMetadata> SelectMetadata(std::span<const uint8_t> slot0, std::span<const uint8_t> slot1,
                                     uint64_t file_size, const ReadIndexFn& read_index);

// Parses a whole store image held in memory (what the fuzzer calls). Extent checksums are not
// verified here; ExpertStore::Open does that.
Result<StoreMetadata> ParseStoreImage(std::span<const uint8_t> image);

// The seed of an extent's checksum: binds the bytes to their (layer, expert, kind, generation),
// so a stale extent with a valid checksum of its own never verifies as a newer one.
uint64_t ExtentSeed(uint32_t layer, uint32_t expert, uint32_t kind_index, uint64_t generation);

namespace internal {
// Recomputes in place, for every superblock slot that carries the magic, the checksum of the index
// it points at and then the superblock checksum, so that a mutated image gets past the checksums
// to the checks behind them. For the fuzzer and for corruption tests.
void ResealImage(std::span<uint8_t> image);
}  // namespace internal

inline uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace sy::storage
