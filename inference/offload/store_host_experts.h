// StoreHostExperts: the whole SSD/PMem tier of the offload stack in one object (DESIGN.md,
// "Tiers"): a file system, the expert store file on it, the storage ExpertCache (MoESys LFU, a
// given number of host slots) and CachedHostExperts over that cache. It is the HostExpertSource
// an expert provider reads experts from when `--store` is given (ExpertProvider::set_host_experts).
//
// Open writes the store from `source` (every expert of its layout, one WriteBatch per MoE layer)
// when the file is absent, and reuses it when present: the layout must match (MoE layers, experts,
// and one kWeights extent of gate | up | down chunks per expert), every expert must have been
// written, and the first and the last expert must equal `source`'s; otherwise the error says to
// remove the file. After Open, `source` is no longer needed.
//
// Spec strings: "uring:PATH" (io_uring), "pmem:PATH", "posix:PATH" and "mem:PATH" (an in-memory
// file system, for tests). io_uring and pmem fall back to posix where this build or kernel lacks
// them (storage::MakeFileSystem logs why; file_system_name() says which runs).
//
// Ownership: owns the file system, the store, the cache and the CachedHostExperts; views Get
// returned hold cache pins and must be dropped before the object is destroyed.
// Thread-safety: Get is thread-safe (ExpertCache is); Open and the accessors from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "inference/offload/cached_host_experts.h"
#include "inference/offload/host_experts.h"
#include "storage/cache/expert_cache.h"
#include "storage/store/expert_store.h"
#include "storage/fs/file_system.h"

namespace sy::offload {

struct ExpertStoreSpec {
  std::string file_system;  // storage::MakeFileSystem's name: posix, io_uring, pmem or mem
  std::string path;         // the store file
};

// "uring:PATH", "pmem:PATH", "posix:PATH" or "mem:PATH"; InvalidArgument otherwise.
Result<ExpertStoreSpec> ParseExpertStoreSpec(std::string_view spec);

struct StoreHostExpertsOptions {
  // Host cache slots, in experts. Required, >= 1.
  size_t host_cache_experts = 0;
  // The host cache's eviction policy. Default: MoESys LFU (storage::PolicyOptions).
  storage::PolicyOptions policy;
};

class StoreHostExperts final : public HostExpertSource {
 public:
  static Result<std::unique_ptr<StoreHostExperts>> Open(const ExpertStoreSpec& spec,
                                                        HostExpertSource& source,
                                                        const StoreHostExpertsOptions& options);
  ~StoreHostExperts() override;

  const ExpertLayout& layout() const override { return cached_->layout(); }
  Result<HostExpert> Get(ExpertKey key) override { return cached_->Get(key); }

  // True when Open wrote the store, false when it reused an existing one.
  bool created() const { return created_; }
  std::string file_system_name() const { return fs_->name(); }
  const storage::ExpertStore& store() const { return *store_; }
  // The host cache's counters (hits, misses, bytes read from the store, stall).
  storage::CacheStats cache_stats() const;

 private:
  StoreHostExperts() = default;

  // Destroyed in reverse: the source over the cache, the cache, the store, the file system.
  std::unique_ptr<storage::FileSystem> fs_;
  std::unique_ptr<storage::ExpertStore> store_;
  std::unique_ptr<storage::ExpertCache> cache_;
  std::unique_ptr<CachedHostExperts> cached_;
  bool created_ = false;
};

}  // namespace sy::offload
