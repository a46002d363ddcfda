// Fnv1a64 against the published FNV-1a 64 test vectors (Landon Curt Noll's FNV reference suite).
#include "runtime/core/hash.h"

#include <gtest/gtest.h>

#include <string>

namespace sy {
namespace {

TEST(Fnv1a64, PublishedVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
}

TEST(Fnv1a64, IsAConstantExpression) { static_assert(Fnv1a64("a") == 0xaf63dc4c8601ec8cull); }

TEST(Fnv1a64, HashesEveryByteIncludingZeroAndHighBytes) {
  const std::string with_zero("a\0b", 3);
  EXPECT_NE(Fnv1a64(with_zero), Fnv1a64("ab"));
  // Bytes >= 0x80 are taken as unsigned: one step from the basis is (basis ^ 0xff) * prime.
  EXPECT_EQ(Fnv1a64("\xff"), (kFnv1a64OffsetBasis ^ 0xffull) * kFnv1a64Prime);
}

TEST(Fnv1a64, ContinuesOverPieces) { EXPECT_EQ(Fnv1a64("bar", Fnv1a64("foo")), Fnv1a64("foobar")); }

// The values of the first seeding code (an independent FNV-1a from that basis, in Python), which
// every initialisation and op-check input since has followed.
TEST(NameSeed, KeepsTheSeedsOfTheFirstSeedingCode) {
  EXPECT_EQ(NameSeed(""), 1469598103934665603ull);
  EXPECT_EQ(NameSeed("a"), 0x44bd8ad473cd9906ull);
  EXPECT_EQ(NameSeed("embed/table"), 0x902ec277b61ac38bull);
}

}  // namespace
}  // namespace sy
