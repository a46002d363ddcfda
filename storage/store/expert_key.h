// ExpertKey: (layer, expert), the name of one expert everywhere in the storage stack, packed
// into 64 bits for hashing and for the cache policies.
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace sy::storage {

struct ExpertKey {
  uint32_t layer = 0;
  uint32_t expert = 0;

  uint64_t Packed() const { return (uint64_t{layer} << 32) | expert; }
  static ExpertKey FromPacked(uint64_t packed) {
    return {static_cast<uint32_t>(packed >> 32), static_cast<uint32_t>(packed)};
  }
  bool operator==(const ExpertKey& o) const { return layer == o.layer && expert == o.expert; }
  bool operator!=(const ExpertKey& o) const { return !(*this == o); }
  bool operator<(const ExpertKey& o) const { return Packed() < o.Packed(); }
  std::string ToString() const {
    return "layer " + std::to_string(layer) + " expert " + std::to_string(expert);
  }
};

struct ExpertKeyHash {
  size_t operator()(const ExpertKey& key) const { return std::hash<uint64_t>()(key.Packed()); }
};

}  // namespace sy::storage
