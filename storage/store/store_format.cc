#include "storage/store/store_format.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>

namespace sy::storage {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the expert store format is little-endian; add byte swapping for this host");

// Superblock field offsets (docs/storage.md has the table).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffSuperblockBytes = 12;
constexpr size_t kOffSequence = 16;
constexpr size_t kOffChecksumKind = 24;
constexpr size_t kOffAlignment = 28;
constexpr size_t kOffLayers = 32;
constexpr size_t kOffExperts = 36;
constexpr size_t kOffKinds = 40;
constexpr size_t kOffIndexArea0 = 48;
constexpr size_t kOffIndexArea1 = 56;
constexpr size_t kOffIndexAreaBytes = 64;
constexpr size_t kOffIndexBytes = 72;
constexpr size_t kOffIndexChecksum = 80;
constexpr size_t kOffDataOffset = 88;
constexpr size_t kOffFileBytes = 96;
constexpr size_t kOffKindTable = 104;
constexpr size_t kKindRecordBytes = 104;  // u32 kind, u32 parts, u64 payload, stride, pool
                                          // offset, pool extents, u64 part[8]
constexpr size_t kOffSuperblockChecksum = kStoreBlock - 8;
static_assert(kOffKindTable + kMaxKinds * kKindRecordBytes <= kOffSuperblockChecksum);

template <typename T>
void Put(uint8_t* base, size_t offset, T value) {
  std::memcpy(base + offset, &value, sizeof(T));
}

template <typename T>
T Get(const uint8_t* base, size_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

// a + b, or false on overflow.
bool AddOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

Status Corrupt(const std::string& what) {
  return DataLossError("expert store superblock: " + what +
                       "; the superblock is corrupt: restore the store from a checkpoint");
}

bool ValidKind(uint32_t value) {
  return value == static_cast<uint32_t>(ExtentKind::kWeights) ||
         value == static_cast<uint32_t>(ExtentKind::kTrainState);
}

std::string EntryName(uint32_t layer, uint32_t expert, const KindInfo& kind) {
  return "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + " (" +
         ExtentKindName(kind.kind) + ")";
}

}  // namespace

std::string ExtentKindName(ExtentKind kind) {
  switch (kind) {
    case ExtentKind::kWeights:
      return "weights";
    case ExtentKind::kTrainState:
      return "train_state";
  }
  return "kind " + std::to_string(static_cast<uint32_t>(kind));
}

uint64_t ExtentSeed(uint32_t layer, uint32_t expert, uint32_t kind_index, uint64_t generation) {
  // splitmix64 over the packed identity: cheap, and different for every field change.
  uint64_t x = (uint64_t{layer} << 40) ^ (uint64_t{expert} << 16) ^ kind_index ^
               (generation * 0x9E3779B97F4A7C15ull);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Result<Superblock> PlanLayout(const StoreLayout& layout) {
  if (layout.num_layers == 0 || layout.num_layers > kMaxLayers) {
    return InvalidArgumentError("store layout: num_layers " + std::to_string(layout.num_layers) +
                                " must be in 1.." + std::to_string(kMaxLayers));
  }
  if (layout.num_experts == 0 || layout.num_experts > kMaxExperts) {
    return InvalidArgumentError("store layout: num_experts " + std::to_string(layout.num_experts) +
                                " must be in 1.." + std::to_string(kMaxExperts));
  }
  if (layout.kinds.empty() || layout.kinds.size() > kMaxKinds) {
    return InvalidArgumentError("store layout: " + std::to_string(layout.kinds.size()) +
                                " extent kinds; use 1.." + std::to_string(kMaxKinds));
  }
  if (!ChecksumAvailable(layout.checksum)) {
    return UnavailableError("store layout: checksum " +
                            std::string(ChecksumKindName(layout.checksum)) +
                            " is not available in this build; use crc32c");
  }
  Superblock sb;
  sb.checksum = layout.checksum;
  sb.num_layers = layout.num_layers;
  sb.num_experts = layout.num_experts;
  uint64_t experts = uint64_t{layout.num_layers} * layout.num_experts;
  for (size_t i = 0; i < layout.kinds.size(); ++i) {
    const KindSpec& spec = layout.kinds[i];
    for (size_t j = 0; j < i; ++j) {
      if (layout.kinds[j].kind == spec.kind) {
        return InvalidArgumentError("store layout: extent kind " + ExtentKindName(spec.kind) +
                                    " is listed twice");
      }
    }
    if (spec.part_bytes.empty() || spec.part_bytes.size() > kMaxParts) {
      return InvalidArgumentError("store layout: kind " + ExtentKindName(spec.kind) + " has " +
                                  std::to_string(spec.part_bytes.size()) + " parts; use 1.." +
                                  std::to_string(kMaxParts));
    }
    KindInfo info;
    info.kind = spec.kind;
    info.part_bytes = spec.part_bytes;
    for (uint64_t part : spec.part_bytes) {
      if (part == 0 || !AddOk(info.payload_bytes, part, &info.payload_bytes) ||
          info.payload_bytes > (uint64_t{1} << 40)) {
        return InvalidArgumentError("store layout: kind " + ExtentKindName(spec.kind) +
                                    " has an empty or oversized part");
      }
    }
    info.stride = AlignUp(info.payload_bytes, kStoreBlock);
    uint64_t spare = spec.spare_extents < 0 ? experts : static_cast<uint64_t>(spec.spare_extents);
    info.pool_extents = experts + spare;
    sb.kinds.push_back(std::move(info));
  }
  sb.index_bytes = sb.num_entries() * kIndexEntryBytes;
  sb.index_area_bytes = AlignUp(sb.index_bytes, kStoreBlock);
  sb.index_area_offset[0] = 2 * kStoreBlock;
  sb.index_area_offset[1] = sb.index_area_offset[0] + sb.index_area_bytes;
  sb.data_offset = sb.index_area_offset[1] + sb.index_area_bytes;
  uint64_t at = sb.data_offset;
  for (KindInfo& info : sb.kinds) {
    info.pool_offset = at;
    uint64_t pool_bytes = 0;
    if (!MulOk(info.pool_extents, info.stride, &pool_bytes) || !AddOk(at, pool_bytes, &at)) {
      return InvalidArgumentError("store layout: the file would exceed 2^64 bytes");
    }
  }
  sb.file_bytes = at;
  return sb;
}

std::array<uint8_t, kStoreBlock> EncodeSuperblock(const Superblock& sb) {
  std::array<uint8_t, kStoreBlock> out{};
  uint8_t* p = out.data();
  std::memcpy(p + kOffMagic, kStoreMagic, sizeof(kStoreMagic));
  Put<uint32_t>(p, kOffVersion, sb.version);
  Put<uint32_t>(p, kOffSuperblockBytes, static_cast<uint32_t>(kStoreBlock));
  Put<uint64_t>(p, kOffSequence, sb.sequence);
  Put<uint32_t>(p, kOffChecksumKind, static_cast<uint32_t>(sb.checksum));
  Put<uint32_t>(p, kOffAlignment, static_cast<uint32_t>(kStoreBlock));
  Put<uint32_t>(p, kOffLayers, sb.num_layers);
  Put<uint32_t>(p, kOffExperts, sb.num_experts);
  Put<uint32_t>(p, kOffKinds, static_cast<uint32_t>(sb.kinds.size()));
  Put<uint64_t>(p, kOffIndexArea0, sb.index_area_offset[0]);
  Put<uint64_t>(p, kOffIndexArea1, sb.index_area_offset[1]);
  Put<uint64_t>(p, kOffIndexAreaBytes, sb.index_area_bytes);
  Put<uint64_t>(p, kOffIndexBytes, sb.index_bytes);
  Put<uint64_t>(p, kOffIndexChecksum, sb.index_checksum);
  Put<uint64_t>(p, kOffDataOffset, sb.data_offset);
  Put<uint64_t>(p, kOffFileBytes, sb.file_bytes);
  for (size_t i = 0; i < sb.kinds.size() && i < kMaxKinds; ++i) {
    const KindInfo& kind = sb.kinds[i];
    size_t base = kOffKindTable + i * kKindRecordBytes;
    Put<uint32_t>(p, base + 0, static_cast<uint32_t>(kind.kind));
    Put<uint32_t>(p, base + 4, static_cast<uint32_t>(kind.part_bytes.size()));
    Put<uint64_t>(p, base + 8, kind.payload_bytes);
    Put<uint64_t>(p, base + 16, kind.stride);
    Put<uint64_t>(p, base + 24, kind.pool_offset);
    Put<uint64_t>(p, base + 32, kind.pool_extents);
    for (size_t j = 0; j < kind.part_bytes.size() && j < kMaxParts; ++j) {
      Put<uint64_t>(p, base + 40 + 8 * j, kind.part_bytes[j]);
    }
  }
  Put<uint64_t>(p, kOffSuperblockChecksum, Crc32c(p, kOffSuperblockChecksum));
  return out;
}

Result<Superblock> ParseSuperblock(std::span<const uint8_t> bytes) {
  const uint8_t* p = bytes.data();
  if (bytes.size() < sizeof(kStoreMagic) ||
      std::memcmp(p + kOffMagic, kStoreMagic, sizeof(kStoreMagic)) != 0) {
    return InvalidArgumentError(
        "not a Switchyard expert store: no 'SYXSTORE' magic at the start of the superblock; "
        "check the path");
  }
  if (bytes.size() < kStoreBlock) {
    return DataLossError("expert store superblock: only " + std::to_string(bytes.size()) +
                         " bytes, need " + std::to_string(kStoreBlock) + ": the file is truncated");
  }
  Superblock sb;
  sb.version = Get<uint32_t>(p, kOffVersion);
  if (sb.version != kStoreVersion) {
    return UnimplementedError("expert store format version " + std::to_string(sb.version) +
                              " is not supported by this build (it reads version " +
                              std::to_string(kStoreVersion) +
                              "); use a matching switchyard or convert the store");
  }
  uint64_t stored_crc = Get<uint64_t>(p, kOffSuperblockChecksum);
  uint64_t crc = Crc32c(p, kOffSuperblockChecksum);
  if (stored_crc != crc) {
    return Corrupt("checksum mismatch (stored " + std::to_string(stored_crc) + ", computed " +
                   std::to_string(crc) + ")");
  }
  if (Get<uint32_t>(p, kOffSuperblockBytes) != kStoreBlock ||
      Get<uint32_t>(p, kOffAlignment) != kStoreBlock) {
    return Corrupt("superblock size or alignment is not 4096");
  }
  sb.sequence = Get<uint64_t>(p, kOffSequence);
  uint32_t checksum = Get<uint32_t>(p, kOffChecksumKind);
  if (checksum != static_cast<uint32_t>(ChecksumKind::kCrc32c) &&
      checksum != static_cast<uint32_t>(ChecksumKind::kXxh3)) {
    return Corrupt("unknown extent checksum kind " + std::to_string(checksum));
  }
  sb.checksum = static_cast<ChecksumKind>(checksum);
  sb.num_layers = Get<uint32_t>(p, kOffLayers);
  sb.num_experts = Get<uint32_t>(p, kOffExperts);
  uint32_t num_kinds = Get<uint32_t>(p, kOffKinds);
  if (sb.num_layers == 0 || sb.num_layers > kMaxLayers || sb.num_experts == 0 ||
      sb.num_experts > kMaxExperts || num_kinds == 0 || num_kinds > kMaxKinds) {
    return Corrupt("layout out of range (layers " + std::to_string(sb.num_layers) + ", experts " +
                   std::to_string(sb.num_experts) + ", kinds " + std::to_string(num_kinds) + ")");
  }
  sb.index_area_offset[0] = Get<uint64_t>(p, kOffIndexArea0);
  sb.index_area_offset[1] = Get<uint64_t>(p, kOffIndexArea1);
  sb.index_area_bytes = Get<uint64_t>(p, kOffIndexAreaBytes);
  sb.index_bytes = Get<uint64_t>(p, kOffIndexBytes);
  sb.index_checksum = Get<uint64_t>(p, kOffIndexChecksum);
  sb.data_offset = Get<uint64_t>(p, kOffDataOffset);
  sb.file_bytes = Get<uint64_t>(p, kOffFileBytes);

  uint64_t experts = uint64_t{sb.num_layers} * sb.num_experts;
  for (uint32_t i = 0; i < num_kinds; ++i) {
    size_t base = kOffKindTable + i * kKindRecordBytes;
    uint32_t kind = Get<uint32_t>(p, base + 0);
    uint32_t parts = Get<uint32_t>(p, base + 4);
    if (!ValidKind(kind)) return Corrupt("kind " + std::to_string(i) + " has unknown id");
    for (const KindInfo& other : sb.kinds) {
      if (static_cast<uint32_t>(other.kind) == kind) return Corrupt("an extent kind repeats");
    }
    if (parts == 0 || parts > kMaxParts) {
      return Corrupt("kind " + std::to_string(i) + " has " + std::to_string(parts) + " parts");
    }
    KindInfo info;
    info.kind = static_cast<ExtentKind>(kind);
    info.payload_bytes = Get<uint64_t>(p, base + 8);
    info.stride = Get<uint64_t>(p, base + 16);
    info.pool_offset = Get<uint64_t>(p, base + 24);
    info.pool_extents = Get<uint64_t>(p, base + 32);
    uint64_t sum = 0;
    for (uint32_t j = 0; j < parts; ++j) {
      uint64_t part = Get<uint64_t>(p, base + 40 + 8 * j);
      if (part == 0 || !AddOk(sum, part, &sum)) {
        return Corrupt("kind " + std::to_string(i) + " part " + std::to_string(j) +
                       " is empty or overflows");
      }
      info.part_bytes.push_back(part);
    }
    if (sum != info.payload_bytes || info.payload_bytes > (uint64_t{1} << 40) ||
        info.stride != AlignUp(info.payload_bytes, kStoreBlock)) {
      return Corrupt("kind " + std::to_string(i) + " sizes disagree (payload " +
                     std::to_string(info.payload_bytes) + ", parts " + std::to_string(sum) +
                     ", stride " + std::to_string(info.stride) + ")");
    }
    if (info.pool_extents < experts) {
      return Corrupt("kind " + std::to_string(i) + " pool holds " +
                     std::to_string(info.pool_extents) + " extents, fewer than the " +
                     std::to_string(experts) + " experts");
    }
    sb.kinds.push_back(std::move(info));
  }

  uint64_t index_bytes = sb.num_entries() * kIndexEntryBytes;
  if (sb.index_bytes != index_bytes || sb.index_area_bytes < index_bytes ||
      sb.index_area_bytes % kStoreBlock != 0) {
    return Corrupt("index size " + std::to_string(sb.index_bytes) + " does not match the " +
                   std::to_string(sb.num_entries()) + " entries of the layout");
  }
  // Regions, in file order: slots, index area 0, index area 1, pools. None may overlap or leave
  // the file.
  uint64_t end = 2 * kStoreBlock;
  for (int area = 0; area < 2; ++area) {
    uint64_t offset = sb.index_area_offset[area];
    if (offset < end || offset % kStoreBlock != 0 || !AddOk(offset, sb.index_area_bytes, &end)) {
      return Corrupt("index area " + std::to_string(area) + " at offset " + std::to_string(offset) +
                     " overlaps another region or is misaligned");
    }
  }
  if (sb.data_offset < end || sb.data_offset % kStoreBlock != 0) {
    return Corrupt("data offset " + std::to_string(sb.data_offset) + " is misplaced");
  }
  end = sb.data_offset;
  for (size_t i = 0; i < sb.kinds.size(); ++i) {
    const KindInfo& info = sb.kinds[i];
    uint64_t pool_bytes = 0;
    if (info.pool_offset < end || info.pool_offset % kStoreBlock != 0 ||
        !MulOk(info.pool_extents, info.stride, &pool_bytes) ||
        !AddOk(info.pool_offset, pool_bytes, &end)) {
      return Corrupt("kind " + std::to_string(i) + " pool at offset " +
                     std::to_string(info.pool_offset) + " overlaps another region or overflows");
    }
  }
  if (end > sb.file_bytes) {
    return Corrupt("regions end at " + std::to_string(end) + ", past the recorded file size " +
                   std::to_string(sb.file_bytes));
  }
  return sb;
}

std::vector<uint8_t> EncodeIndex(const Superblock& sb, const std::vector<IndexEntry>& entries) {
  std::vector<uint8_t> out(AlignUp(entries.size() * kIndexEntryBytes, kStoreBlock), 0);
  uint8_t* p = out.data();
  for (size_t i = 0; i < entries.size(); ++i) {
    const IndexEntry& e = entries[i];
    size_t base = i * kIndexEntryBytes;
    Put<uint32_t>(p, base + 0, e.layer);
    Put<uint32_t>(p, base + 4, e.expert);
    Put<uint32_t>(p, base + 8, e.kind_index);
    Put<uint32_t>(p, base + 12, 0);
    Put<uint64_t>(p, base + 16, e.offset);
    Put<uint64_t>(p, base + 24, e.length);
    Put<uint64_t>(p, base + 32, e.checksum);
    Put<uint64_t>(p, base + 40, e.generation);
  }
  return out;
}

Result<std::vector<IndexEntry>> ParseIndex(const Superblock& sb, std::span<const uint8_t> bytes,
                                           uint64_t file_size) {
  if (bytes.size() < sb.index_bytes) {
    return DataLossError("expert store index: " + std::to_string(bytes.size()) +
                         " bytes available, the superblock needs " +
                         std::to_string(sb.index_bytes) + ": the file is truncated");
  }
  uint64_t crc = Crc32c(bytes.data(), sb.index_bytes);
  if (crc != sb.index_checksum) {
    return DataLossError("expert store index (sequence " + std::to_string(sb.sequence) +
                         "): checksum mismatch (stored " + std::to_string(sb.index_checksum) +
                         ", computed " + std::to_string(crc) + "): the index is torn or corrupt");
  }
  if (file_size < sb.file_bytes) {
    return DataLossError("expert store: the file has " + std::to_string(file_size) +
                         " bytes but the superblock records " + std::to_string(sb.file_bytes) +
                         ": the file is truncated; restore it from a checkpoint");
  }
  std::vector<IndexEntry> entries;
  entries.reserve(sb.num_entries());
  std::vector<uint64_t> used_offsets;
  const uint8_t* p = bytes.data();
  for (uint64_t i = 0; i < sb.num_entries(); ++i) {
    size_t base = i * kIndexEntryBytes;
    IndexEntry e;
    e.layer = Get<uint32_t>(p, base + 0);
    e.expert = Get<uint32_t>(p, base + 4);
    e.kind_index = Get<uint32_t>(p, base + 8);
    uint32_t flags = Get<uint32_t>(p, base + 12);
    e.offset = Get<uint64_t>(p, base + 16);
    e.length = Get<uint64_t>(p, base + 24);
    e.checksum = Get<uint64_t>(p, base + 32);
    e.generation = Get<uint64_t>(p, base + 40);
    uint64_t kinds = sb.kinds.size();
    uint32_t want_layer = static_cast<uint32_t>(i / kinds / sb.num_experts);
    uint32_t want_expert = static_cast<uint32_t>(i / kinds % sb.num_experts);
    auto want_kind = static_cast<uint32_t>(i % kinds);
    if (e.layer != want_layer || e.expert != want_expert || e.kind_index != want_kind ||
        flags != 0) {
      return DataLossError("expert store index entry " + std::to_string(i) +
                           " is out of order (holds layer " + std::to_string(e.layer) + " expert " +
                           std::to_string(e.expert) + " kind " + std::to_string(e.kind_index) +
                           "): the index is corrupt");
    }
    const KindInfo& kind = sb.kinds[want_kind];
    std::string name = EntryName(e.layer, e.expert, kind);
    if (e.generation == 0) {
      if (e.offset != 0 || e.length != 0 || e.checksum != 0) {
        return DataLossError("expert store index: " + name +
                             " was never written but has an extent: the index is corrupt");
      }
      entries.push_back(e);
      continue;
    }
    uint64_t end = 0;
    if (e.length != kind.payload_bytes) {
      return DataLossError("expert store index: " + name + " has length " +
                           std::to_string(e.length) + ", the layout says " +
                           std::to_string(kind.payload_bytes) + ": the index is corrupt");
    }
    if (!AddOk(e.offset, kind.stride, &end) || end > file_size) {
      return DataLossError("expert store index: " + name + " points to offset " +
                           std::to_string(e.offset) + ", past the end of the file (" +
                           std::to_string(file_size) +
                           " bytes): the file is truncated; restore it from a checkpoint");
    }
    uint64_t pool_end = kind.pool_offset + kind.pool_extents * kind.stride;
    if (e.offset < kind.pool_offset || end > pool_end ||
        (e.offset - kind.pool_offset) % kind.stride != 0) {
      return DataLossError("expert store index: " + name + " points to offset " +
                           std::to_string(e.offset) + ", not an extent of its pool [" +
                           std::to_string(kind.pool_offset) + ", " + std::to_string(pool_end) +
                           "): the index is corrupt");
    }
    used_offsets.push_back(e.offset);
    entries.push_back(e);
  }
  std::sort(used_offsets.begin(), used_offsets.end());
  auto dup = std::adjacent_find(used_offsets.begin(), used_offsets.end());
  if (dup != used_offsets.end()) {
    return DataLossError("expert store index: two entries share the extent at offset " +
                         std::to_string(*dup) + ": the index is corrupt");
  }
  return entries;
}

Result<StoreMetadata> SelectMetadata(std::span<const uint8_t> slot0, std::span<const uint8_t> slot1,
                                     uint64_t file_size, const ReadIndexFn& read_index) {
  std::array<Result<Superblock>, 2> parsed = {ParseSuperblock(slot0), ParseSuperblock(slot1)};
  std::array<int, 2> order = {0, 1};
  if (parsed[0].ok() && parsed[1].ok() && parsed[1]->sequence > parsed[0]->sequence) {
    order = {1, 0};
  } else if (!parsed[0].ok() && parsed[1].ok()) {
    order = {1, 0};
  }
  std::array<Status, 2> why = {parsed[0].status(), parsed[1].status()};
  for (int slot : order) {
    if (!parsed[slot].ok()) continue;
    const Superblock& sb = *parsed[slot];
    if (sb.sequence % 2 != static_cast<uint64_t>(slot)) {
      why[slot] = DataLossError("expert store superblock slot " + std::to_string(slot) +
                                " holds sequence " + std::to_string(sb.sequence) +
                                ", which belongs in the other slot: the superblock is corrupt");
      continue;
    }
    Result<std::vector<uint8_t>> index_bytes = read_index(sb);
    // A read that failed (EIO) says nothing about the slot's contents: falling back to the other
    // slot would silently open an older generation. Only corruption rejects a slot.
    if (!index_bytes.ok() && index_bytes.status().code() != StatusCode::kDataLoss) {
      return index_bytes.status();
    }
    if (!index_bytes.ok()) {
      why[slot] = index_bytes.status();
      continue;
    }
    Result<std::vector<IndexEntry>> entries = ParseIndex(sb, *index_bytes, file_size);
    if (!entries.ok()) {
      why[slot] = entries.status();
      continue;
    }
    StoreMetadata metadata;
    metadata.superblock = sb;
    metadata.slot = slot;
    metadata.entries = std::move(*entries);
    int other = 1 - slot;
    // An other slot without the magic was simply never written (a new store): nothing to note.
    if (!why[other].ok() && why[other].code() != StatusCode::kInvalidArgument) {
      metadata.other_slot_note = why[other].message();
    }
    if (parsed[other].ok() && why[other].ok() && parsed[other]->sequence > sb.sequence) {
      metadata.other_slot_note = "newer slot rejected";
    }
    if (parsed[other].ok() && parsed[other]->sequence + 1 == sb.sequence &&
        parsed[other]->sequence % 2 == static_cast<uint64_t>(other)) {
      Result<std::vector<uint8_t>> previous_bytes = read_index(*parsed[other]);
      // Without the previous index an interrupted newest publish could not be rolled back.
      if (!previous_bytes.ok() && previous_bytes.status().code() != StatusCode::kDataLoss) {
        return previous_bytes.status();
      }
      if (previous_bytes.ok()) {
        Result<std::vector<IndexEntry>> previous =
            ParseIndex(*parsed[other], *previous_bytes, file_size);
        if (previous.ok()) {
          metadata.has_previous = true;
          metadata.previous_superblock = *parsed[other];
          metadata.previous_slot = other;
          metadata.previous_entries = std::move(*previous);
        }
      }
    }
    return metadata;
  }
  // Neither slot is usable. Report the most specific reason: a version this build cannot read,
  // then "not a store at all", then corruption.
  for (const Status& s : why) {
    if (s.code() == StatusCode::kUnimplemented) return s;
  }
  if (why[0].code() == StatusCode::kInvalidArgument &&
      why[1].code() == StatusCode::kInvalidArgument) {
    return why[0];
  }
  std::string message = "expert store: no valid superblock. slot 0: " + why[0].ToString() +
                        "; slot 1: " + why[1].ToString();
  return DataLossError(message);
}

Result<StoreMetadata> ParseStoreImage(std::span<const uint8_t> image) {
  std::span<const uint8_t> slot0 = image.subspan(0, std::min<size_t>(image.size(), kStoreBlock));
  std::span<const uint8_t> slot1 =
      image.size() > kStoreBlock
          ? image.subspan(kStoreBlock, std::min<size_t>(image.size() - kStoreBlock, kStoreBlock))
          : std::span<const uint8_t>();
  uint64_t size = image.size();
  return SelectMetadata(
      slot0, slot1, size, [&](const Superblock& sb) -> Result<std::vector<uint8_t>> {
        uint64_t offset = sb.index_area_offset[sb.sequence % 2];
        uint64_t end = 0;
        if (!AddOk(offset, sb.index_bytes, &end) || end > size) {
          return DataLossError("expert store index at offset " + std::to_string(offset) + " (" +
                               std::to_string(sb.index_bytes) +
                               " bytes) lies past the end of the file (" + std::to_string(size) +
                               " bytes): the file is truncated");
        }
        return std::vector<uint8_t>(image.begin() + static_cast<ptrdiff_t>(offset),
                                    image.begin() + static_cast<ptrdiff_t>(end));
      });
}

namespace internal {

void ResealImage(std::span<uint8_t> image) {
  for (uint64_t slot = 0; slot < 2; ++slot) {
    uint64_t base = slot * kStoreBlock;
    if (image.size() < base + kStoreBlock) continue;
    uint8_t* p = image.data() + base;
    if (std::memcmp(p + kOffMagic, kStoreMagic, sizeof(kStoreMagic)) != 0) continue;
    uint64_t sequence = Get<uint64_t>(p, kOffSequence);
    uint64_t area = Get<uint64_t>(p, sequence % 2 == 0 ? kOffIndexArea0 : kOffIndexArea1);
    uint64_t index_bytes = Get<uint64_t>(p, kOffIndexBytes);
    if (area <= image.size() && index_bytes <= image.size() - area) {
      Put<uint64_t>(p, kOffIndexChecksum, Crc32c(image.data() + area, index_bytes));
    }
    Put<uint64_t>(p, kOffSuperblockChecksum, Crc32c(p, kOffSuperblockChecksum));
  }
}

}  // namespace internal
}  // namespace sy::storage
