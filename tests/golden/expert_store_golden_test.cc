// The golden expert store (tests/golden/expert_store.bin; README.md): a store of 2 layers x 2
// experts with two extent kinds, CRC-32C checksums, one spare extent per kind, and one committed
// generation of every (layer, expert, kind), whose payload bytes are PayloadByte below.
//   - Created and written again now (on the in-memory file system, one WriteBatch, so one
//     publish), the file is the golden one byte for byte.
//   - Opened with ExpertStore::Open, the golden file gives generation 1 and the formula's bytes
//     for every expert; check_golden.py decodes it independently, from the format in
//     docs/storage.md.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "storage/fs/mem_file_system.h"
#include "storage/store/expert_store.h"
#include "tests/golden/golden_file.h"

namespace sy::golden {
namespace {

using storage::ExpertStore;
using storage::ExtentKind;

constexpr char kGoldenFile[] = "expert_store.bin";
constexpr uint32_t kLayers = 2;
constexpr uint32_t kExperts = 2;
constexpr char kPath[] = "/golden/store";

storage::StoreLayout Layout() {
  storage::StoreLayout layout;
  layout.num_layers = kLayers;
  layout.num_experts = kExperts;
  layout.checksum = storage::ChecksumKind::kCrc32c;  // always available: the bytes are portable
  layout.kinds.push_back({ExtentKind::kWeights, {24, 40, 24}, /*spare_extents=*/1});
  layout.kinds.push_back({ExtentKind::kTrainState, {16, 16, 16}, /*spare_extents=*/1});
  return layout;
}

// Byte i of the payload of (layer, expert, kind_index); check_golden.py has the same formula.
std::byte PayloadByte(uint32_t layer, uint32_t expert, uint32_t kind_index, size_t i) {
  return static_cast<std::byte>((i * 7 + layer * 31 + expert * 11 + kind_index * 101) & 0xFF);
}

std::vector<std::byte> Payload(uint32_t layer, uint32_t expert, uint32_t kind_index, size_t bytes) {
  std::vector<std::byte> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = PayloadByte(layer, expert, kind_index, i);
  return out;
}

uint64_t PayloadBytes(uint32_t kind_index) {
  const storage::StoreLayout layout = Layout();
  uint64_t sum = 0;
  for (uint64_t part : layout.kinds[kind_index].part_bytes) sum += part;
  return sum;
}

TEST(ExpertStoreGoldenTest, OneGenerationReproducesTheGoldenBytes) {
  storage::MemFileSystem fs(/*io_threads=*/2);
  {
    Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Create(&fs, kPath, Layout());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    std::vector<std::vector<std::byte>> payloads;
    std::vector<ExpertStore::WriteRequest> requests;
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (uint32_t e = 0; e < kExperts; ++e) {
        for (uint32_t k = 0; k < 2; ++k) {
          payloads.push_back(Payload(l, e, k, PayloadBytes(k)));
          requests.push_back({{l, e}, Layout().kinds[k].kind, {}});
        }
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) requests[i].data = payloads[i];
    // The callbacks run on the committer just after the publish: each fulfils its promise.
    std::vector<std::promise<Result<uint64_t>>> done(requests.size());
    (*store)->WriteBatch(requests,
                         [&](size_t i, Result<uint64_t> r) { done[i].set_value(std::move(r)); });
    for (std::promise<Result<uint64_t>>& d : done) {
      Result<uint64_t> generation = d.get_future().get();
      ASSERT_TRUE(generation.ok()) << generation.status().ToString();
      EXPECT_EQ(*generation, 1u);
    }
    EXPECT_EQ((*store)->stats().publishes, 1u);
  }
  Result<std::vector<uint8_t>> bytes = fs.Contents(kPath);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_TRUE(MatchesGolden(*bytes, kGoldenFile));
}

TEST(ExpertStoreGoldenTest, GoldenStoreOpensWithEveryExpertAtGenerationOne) {
  const std::vector<uint8_t> golden = ReadFileBytes(GoldenPath(kGoldenFile));
  ASSERT_FALSE(golden.empty());
  storage::MemFileSystem fs(/*io_threads=*/2);
  {
    storage::OpenOptions create;
    create.create = true;
    Result<std::unique_ptr<storage::File>> file = fs.Open(kPath, create);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ASSERT_TRUE((*file)->Write(0, golden.data(), golden.size()).ok());
  }
  Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(&fs, kPath);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->corrupt_extents().empty());
  // A new store is publish 1; the one WriteBatch is publish 2.
  EXPECT_EQ((*store)->sequence(), 2u);
  EXPECT_EQ((*store)->checksum_kind(), storage::ChecksumKind::kCrc32c);
  ASSERT_EQ((*store)->kinds().size(), 2u);
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint32_t e = 0; e < kExperts; ++e) {
      for (uint32_t k = 0; k < 2; ++k) {
        SCOPED_TRACE("layer " + std::to_string(l) + " expert " + std::to_string(e) + " kind " +
                     std::to_string(k));
        const ExtentKind kind = Layout().kinds[k].kind;
        EXPECT_EQ(*(*store)->Generation({l, e}, kind), 1u);
        std::vector<std::byte> got(4096);
        ASSERT_TRUE((*store)->Read({l, e}, kind, got).get().ok());
        got.resize(PayloadBytes(k));
        EXPECT_EQ(got, Payload(l, e, k, PayloadBytes(k)));
      }
    }
  }
}

}  // namespace
}  // namespace sy::golden
