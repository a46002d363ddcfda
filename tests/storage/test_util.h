// Helpers shared by the storage tests: a scratch directory on the real disk, and deterministic
// expert contents to check reads against.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/temp_dir.h"

namespace sy::storage::testing {

// The scratch directory of every test (tests/temp_dir.h); storage's default name.
class TempDir : public sy::testing::TempDir {
 public:
  TempDir() : sy::testing::TempDir("storage-test") {}
};

// The bytes expert (layer, expert) holds at `generation`: an xorshift stream seeded by all three,
// so any mix-up of expert, generation or offset shows.
inline std::vector<std::byte> ExpertBytes(uint32_t layer, uint32_t expert, uint64_t generation,
                                          size_t bytes) {
  std::vector<std::byte> out(bytes);
  // splitmix64 of the identity as the seed, so even the first byte differs between experts.
  uint64_t x = (uint64_t{layer} << 48) ^ (uint64_t{expert} << 24) ^ generation;
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(x & 0xFF);
  }
  return out;
}

}  // namespace sy::storage::testing
