#include "storage/store/store_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace sy::storage {
namespace {

StoreLayout SmallLayout() {
  StoreLayout layout;
  layout.num_layers = 2;
  layout.num_experts = 3;
  layout.checksum = ChecksumKind::kCrc32c;
  layout.kinds.push_back(KindSpec{ExtentKind::kWeights, {1000, 2000, 1000}, -1});
  layout.kinds.push_back(KindSpec{ExtentKind::kTrainState, {4096, 4096, 4096}, 2});
  return layout;
}

// Builds a whole file image with a valid superblock in slot `seq % 2` and `entries` as its index.
std::vector<uint8_t> Image(Superblock sb, const std::vector<IndexEntry>& entries) {
  std::vector<uint8_t> image(sb.file_bytes, 0);
  std::vector<uint8_t> index = EncodeIndex(sb, entries);
  sb.index_checksum = Crc32c(index.data(), sb.index_bytes);
  std::memcpy(image.data() + sb.index_area_offset[sb.sequence % 2], index.data(), index.size());
  auto super = EncodeSuperblock(sb);
  std::memcpy(image.data() + (sb.sequence % 2) * kStoreBlock, super.data(), super.size());
  return image;
}

std::vector<IndexEntry> EmptyEntries(const Superblock& sb) {
  std::vector<IndexEntry> entries(sb.num_entries());
  for (uint32_t l = 0; l < sb.num_layers; ++l) {
    for (uint32_t e = 0; e < sb.num_experts; ++e) {
      for (uint32_t k = 0; k < sb.kinds.size(); ++k) {
        IndexEntry& entry = entries[sb.EntryIndex(l, e, k)];
        entry.layer = l;
        entry.expert = e;
        entry.kind_index = k;
      }
    }
  }
  return entries;
}

TEST(StoreFormatTest, PlansAlignedNonOverlappingRegions) {
  Result<Superblock> sb = PlanLayout(SmallLayout());
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->num_entries(), 12u);
  EXPECT_EQ(sb->index_bytes, 12u * 48);
  EXPECT_EQ(sb->index_area_offset[0], 8192u);
  EXPECT_EQ(sb->index_area_offset[1], 8192u + 4096);
  EXPECT_EQ(sb->data_offset, 8192u + 8192);
  EXPECT_EQ(sb->kinds[0].payload_bytes, 4000u);
  EXPECT_EQ(sb->kinds[0].stride, 4096u);
  EXPECT_EQ(sb->kinds[0].pool_extents, 12u);  // 6 experts + 6 spare
  EXPECT_EQ(sb->kinds[1].stride, 12288u);
  EXPECT_EQ(sb->kinds[1].pool_extents, 8u);
  EXPECT_EQ(sb->kinds[1].pool_offset, sb->data_offset + 12 * 4096);
  EXPECT_EQ(sb->file_bytes, sb->kinds[1].pool_offset + 8 * 12288);
}

TEST(StoreFormatTest, RejectsBadLayouts) {
  StoreLayout layout = SmallLayout();
  layout.num_layers = 0;
  EXPECT_EQ(PlanLayout(layout).status().code(), StatusCode::kInvalidArgument);
  layout = SmallLayout();
  layout.kinds[1].kind = ExtentKind::kWeights;
  EXPECT_EQ(PlanLayout(layout).status().code(), StatusCode::kInvalidArgument);
  layout = SmallLayout();
  layout.kinds[0].part_bytes = {};
  EXPECT_EQ(PlanLayout(layout).status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreFormatTest, SuperblockRoundTrips) {
  Superblock sb = *PlanLayout(SmallLayout());
  sb.sequence = 17;
  sb.index_checksum = 0xABCDEF;
  auto bytes = EncodeSuperblock(sb);
  Result<Superblock> back = ParseSuperblock(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sequence, 17u);
  EXPECT_EQ(back->index_checksum, 0xABCDEFu);
  EXPECT_EQ(back->num_layers, 2u);
  ASSERT_EQ(back->kinds.size(), 2u);
  EXPECT_EQ(back->kinds[0].part_bytes, (std::vector<uint64_t>{1000, 2000, 1000}));
  EXPECT_EQ(back->kinds[1].pool_offset, sb.kinds[1].pool_offset);
  EXPECT_EQ(back->file_bytes, sb.file_bytes);
}

TEST(StoreFormatTest, WrongMagicIsNotAStore) {
  Superblock sb = *PlanLayout(SmallLayout());
  auto bytes = EncodeSuperblock(sb);
  bytes[0] = 'X';
  Result<Superblock> parsed = ParseSuperblock(bytes);
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("not a Switchyard expert store"), std::string::npos);
}

TEST(StoreFormatTest, NewerVersionIsUnsupported) {
  Superblock sb = *PlanLayout(SmallLayout());
  sb.version = 2;
  Result<Superblock> parsed = ParseSuperblock(EncodeSuperblock(sb));
  EXPECT_EQ(parsed.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(parsed.status().message().find("version 2"), std::string::npos);
}

TEST(StoreFormatTest, AnyFlippedByteFailsTheChecksum) {
  Superblock sb = *PlanLayout(SmallLayout());
  auto good = EncodeSuperblock(sb);
  for (size_t i = 8; i < kStoreBlock; i += 97) {  // past the magic
    auto bad = good;
    bad[i] ^= 0x40;
    Result<Superblock> parsed = ParseSuperblock(bad);
    ASSERT_FALSE(parsed.ok()) << "byte " << i;
    EXPECT_TRUE(parsed.status().code() == StatusCode::kDataLoss ||
                parsed.status().code() == StatusCode::kUnimplemented)
        << parsed.status().ToString();
  }
}

TEST(StoreFormatTest, ImageWithValidIndexParses) {
  Superblock sb = *PlanLayout(SmallLayout());
  sb.sequence = 3;
  std::vector<IndexEntry> entries = EmptyEntries(sb);
  IndexEntry& e = entries[sb.EntryIndex(1, 2, 1)];
  e.offset = sb.kinds[1].pool_offset + 3 * sb.kinds[1].stride;
  e.length = sb.kinds[1].payload_bytes;
  e.checksum = 5;
  e.generation = 4;
  Result<StoreMetadata> metadata = ParseStoreImage(Image(sb, entries));
  ASSERT_TRUE(metadata.ok()) << metadata.status().ToString();
  EXPECT_EQ(metadata->slot, 1);
  EXPECT_EQ(metadata->superblock.sequence, 3u);
  EXPECT_EQ(metadata->entries[sb.EntryIndex(1, 2, 1)].generation, 4u);
}

TEST(StoreFormatTest, IndexPointingPastTheEndOfTheFileIsReported) {
  Superblock sb = *PlanLayout(SmallLayout());
  sb.sequence = 2;
  std::vector<IndexEntry> entries = EmptyEntries(sb);
  IndexEntry& e = entries[sb.EntryIndex(1, 1, 1)];
  e.offset = sb.kinds[1].pool_offset + 7 * sb.kinds[1].stride;  // the last extent
  e.length = sb.kinds[1].payload_bytes;
  e.generation = 1;
  std::vector<uint8_t> image = Image(sb, entries);
  ASSERT_GT(image.size(), 4096u);
  image.erase(image.end() - 4096, image.end());  // truncated
  Result<StoreMetadata> metadata = ParseStoreImage(image);
  ASSERT_FALSE(metadata.ok());
  EXPECT_EQ(metadata.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(metadata.status().message().find("truncated"), std::string::npos)
      << metadata.status().message();

  // A full-size file whose index entry points outside its pool.
  e.offset = sb.file_bytes;
  Result<StoreMetadata> outside = ParseStoreImage(Image(sb, entries));
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("layer 1 expert 1 (train_state)"), std::string::npos)
      << outside.status().message();
  EXPECT_NE(outside.status().message().find("past the end of the file"), std::string::npos)
      << outside.status().message();
}

TEST(StoreFormatTest, TwoEntriesSharingAnExtentAreCorrupt) {
  Superblock sb = *PlanLayout(SmallLayout());
  sb.sequence = 2;
  std::vector<IndexEntry> entries = EmptyEntries(sb);
  for (uint32_t expert : {0u, 1u}) {
    IndexEntry& e = entries[sb.EntryIndex(0, expert, 0)];
    e.offset = sb.kinds[0].pool_offset;
    e.length = sb.kinds[0].payload_bytes;
    e.generation = 1;
  }
  Result<StoreMetadata> metadata = ParseStoreImage(Image(sb, entries));
  ASSERT_FALSE(metadata.ok());
  EXPECT_NE(metadata.status().message().find("share the extent"), std::string::npos);
}

TEST(StoreFormatTest, NewestSlotWinsAndATornNewestFallsBack) {
  Superblock sb = *PlanLayout(SmallLayout());
  std::vector<IndexEntry> entries = EmptyEntries(sb);
  sb.sequence = 4;
  std::vector<uint8_t> image = Image(sb, entries);
  // Add sequence 5 in slot 1 with its own index.
  Superblock newer = sb;
  newer.sequence = 5;
  std::vector<uint8_t> index = EncodeIndex(newer, entries);
  newer.index_checksum = Crc32c(index.data(), newer.index_bytes);
  std::memcpy(image.data() + newer.index_area_offset[1], index.data(), index.size());
  auto super = EncodeSuperblock(newer);
  std::memcpy(image.data() + kStoreBlock, super.data(), super.size());
  EXPECT_EQ(ParseStoreImage(image)->superblock.sequence, 5u);
  // Tear the newer superblock: the older one is used and the reason is noted.
  image[kStoreBlock + 100] ^= 1;
  Result<StoreMetadata> metadata = ParseStoreImage(image);
  ASSERT_TRUE(metadata.ok());
  EXPECT_EQ(metadata->superblock.sequence, 4u);
  EXPECT_NE(metadata->other_slot_note.find("checksum"), std::string::npos);
  // Tear the older index too: nothing valid is left.
  image[sb.index_area_offset[0] + 10] ^= 1;
  metadata = ParseStoreImage(image);
  EXPECT_EQ(metadata.status().code(), StatusCode::kDataLoss);
}

TEST(StoreFormatTest, GarbageAndEmptyInputsGiveErrorsNotCrashes) {
  EXPECT_EQ(ParseStoreImage({}).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> text(100, 'a');
  EXPECT_EQ(ParseStoreImage(text).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> magic_only(kStoreMagic, kStoreMagic + 8);
  EXPECT_EQ(ParseStoreImage(magic_only).status().code(), StatusCode::kDataLoss);
}

TEST(StoreFormatTest, ExtentSeedDependsOnEveryField) {
  uint64_t base = ExtentSeed(1, 2, 0, 3);
  EXPECT_NE(base, ExtentSeed(2, 2, 0, 3));
  EXPECT_NE(base, ExtentSeed(1, 3, 0, 3));
  EXPECT_NE(base, ExtentSeed(1, 2, 1, 3));
  EXPECT_NE(base, ExtentSeed(1, 2, 0, 4));
}

}  // namespace
}  // namespace sy::storage
