// Fnv1a64: the 64-bit FNV-1a hash (Fowler, Noll, Vo) of a byte string, the one stable hash
// Switchyard writes to files or seeds from: the predictor file's checksum
// (inference/offload/expert_predictor.h), and through NameSeed each parameter's initialisation
// seed (runtime/model/parameter_store.cc) and each op-check case's data seed (runtime/opcheck).
//
// Unlike std::hash its value is fixed by the algorithm: the same on every platform, build and
// run, so it may be stored. It is not a cryptographic hash and does not resist a chosen input.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string_view>

namespace sy {

inline constexpr uint64_t kFnv1a64OffsetBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

// FNV-1a 64 of `bytes`. Pass a previous result as `hash` to continue over a second piece:
// Fnv1a64(b, Fnv1a64(a)) == Fnv1a64(a + b).
constexpr uint64_t Fnv1a64(std::string_view bytes, uint64_t hash = kFnv1a64OffsetBasis) {
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= kFnv1a64Prime;
  }
  return hash;
}

// Where the seeds derived from names start instead of kFnv1a64OffsetBasis: FNV's decimal offset
// basis without its last digit, as the first seeding code had it. Kept, because every
// initialisation and op-check input follows from it, and so do the trained results, thresholds
// and tolerances chosen with them.
inline constexpr uint64_t kNameSeedBasis = 1469598103934665603ull;

// A seed for the stream of random values belonging to `name` (a parameter, an op-check case).
constexpr uint64_t NameSeed(std::string_view name) { return Fnv1a64(name, kNameSeedBasis); }

}  // namespace sy
