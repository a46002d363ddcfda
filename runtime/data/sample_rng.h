// SampleRng: the small counter-seeded random generator behind the datasets.
//
// Every example is generated from its own SampleRng seeded by MixSeed(seed, split, index), so an
// example depends only on those numbers: batches are reproducible, any example can be produced
// out of order, and a data position (a few integers) restores the stream exactly. The generator is
// SplitMix64 and the bounded draws are written out here, rather than taken from <random>, whose
// distributions differ between standard libraries.
//
// Ownership: a value type. Thread-safety: one instance per thread.
#pragma once

#include <cstdint>

namespace sy {

// Combines seeds; different argument lists give unrelated streams.
inline uint64_t MixSeed(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), unbiased (Lemire's multiply-and-reject). n > 0.
  uint64_t Uniform(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // Uniform in [0, 1) with 53 random bits.
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1p-53; }

 private:
  uint64_t state_;
};

}  // namespace sy
