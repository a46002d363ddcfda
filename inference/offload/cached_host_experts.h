// CachedHostExperts: the host tier backed by the SSD/PMem expert store (DESIGN.md, "Tiers"): a
// HostExpertSource over a storage::ExpertCache of kind kWeights, whose extent per expert is
// gate | up | down in the compute dtype (storage/store/store_format.h). The store's `layer` is the MoE
// layer index, as everywhere in the offload stack.
//
// Get(key) acquires the cache entry (reading it from the store on a miss, evicting by the cache's
// policy) and returns chunk views into its host slot. The views hold the CacheHandle: the slot is
// neither evicted nor rewritten while a transfer or the CPU executor still reads it, and it is
// released when the last view goes.
//
// Ownership: borrows the cache, which must outlive the object and every view Get returned.
// Thread-safety: Get is thread-safe (ExpertCache is).
#pragma once

#include <memory>

#include "inference/offload/host_experts.h"
#include "storage/cache/expert_cache.h"

namespace sy::offload {

class CachedHostExperts final : public HostExpertSource {
 public:
  // InvalidArgument for a bad layout, or when the cache's extents are not three chunks of
  // layout.chunk_bytes().
  static Result<std::unique_ptr<CachedHostExperts>> Create(storage::ExpertCache* cache,
                                                           const ExpertLayout& layout);

  const ExpertLayout& layout() const override { return layout_; }
  // The store's error (NotFound for an expert never written, DataLoss for a bad checksum) when
  // the read fails.
  Result<HostExpert> Get(ExpertKey key) override;

 private:
  CachedHostExperts(storage::ExpertCache* cache, const ExpertLayout& layout)
      : cache_(cache), layout_(layout) {}

  storage::ExpertCache* cache_;
  ExpertLayout layout_;
};

}  // namespace sy::offload
