#include "storage/store/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sy::storage {
namespace {

// RFC 3720 (iSCSI) appendix B.4 test vectors, and the common "123456789" check value.
TEST(Crc32cTest, MatchesPublishedVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0x00);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  std::vector<uint8_t> ones(32, 0xFF);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<uint8_t> up(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(up.data(), up.size()), 0x46DD794Eu);
  std::vector<uint8_t> down(32);
  for (int i = 0; i < 32; ++i) down[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(Crc32c(down.data(), down.size()), 0x113FDB5Cu);
}

TEST(Crc32cTest, HardwareMatchesTableAndChains) {
  std::mt19937 rng(7);
  // Around the three-chain paths' edges: 3 x 256 and 3 x 8192 bytes, and past both.
  for (size_t length : {0u, 1u, 7u, 8u, 9u, 63u, 767u, 768u, 769u, 4096u, 24575u, 24576u, 25351u,
                        100003u, 1048579u}) {
    std::vector<uint8_t> data(length);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    uint32_t whole = Crc32c(data.data(), data.size());
    EXPECT_EQ(whole, internal::Crc32cPortable(data.data(), data.size())) << length;
    size_t half = length / 2;
    uint32_t chained = Crc32c(data.data() + half, length - half, Crc32c(data.data(), half));
    EXPECT_EQ(whole, chained) << length;
  }
}

// The three interleaved chains against the table and against one chain, from an odd address and a
// non-zero starting CRC, over every length the joins can split differently.
TEST(Crc32cTest, ThreeChainsMatchOneChainAndTheTable) {
  std::mt19937 rng(11);
  std::vector<uint8_t> buffer(3 * 8192 * 2 + 3 * 256 + 64);
  for (auto& b : buffer) b = static_cast<uint8_t>(rng());
  const uint8_t* odd = buffer.data() + 3;
  for (size_t length = 3 * 8192 - 8; length < buffer.size() - 3; length += 251) {
    const uint32_t start = static_cast<uint32_t>(rng());
    const uint32_t table = internal::Crc32cPortable(odd, length, start);
    EXPECT_EQ(Crc32c(odd, length, start), table) << length;
    EXPECT_EQ(internal::Crc32cOneStream(odd, length, start), table) << length;
  }
}

TEST(ChecksumTest, Xxh3MatchesPublishedEmptyVectorWhenAvailable) {
  if (!ChecksumAvailable(ChecksumKind::kXxh3)) {
    GTEST_SKIP() << "this build has no libxxhash";
  }
  // XXH3_64bits of the empty input with seed 0 (xxHash's sanity-check table).
  EXPECT_EQ(ComputeChecksum(ChecksumKind::kXxh3, 0, "", 0), 0x2D06800538D394C2ull);
  std::string text = "switchyard";
  EXPECT_NE(ComputeChecksum(ChecksumKind::kXxh3, 1, text.data(), text.size()),
            ComputeChecksum(ChecksumKind::kXxh3, 2, text.data(), text.size()));
}

TEST(ChecksumTest, SeedChangesTheSum) {
  std::string text = "expert";
  EXPECT_NE(ComputeChecksum(ChecksumKind::kCrc32c, 1, text.data(), text.size()),
            ComputeChecksum(ChecksumKind::kCrc32c, 2, text.data(), text.size()));
}

TEST(ChecksumTest, ParsesNames) {
  EXPECT_EQ(*ParseChecksumKind("crc32c"), ChecksumKind::kCrc32c);
  EXPECT_EQ(*ParseChecksumKind("xxh3"), ChecksumKind::kXxh3);
  EXPECT_FALSE(ParseChecksumKind("md5").ok());
}

}  // namespace
}  // namespace sy::storage
