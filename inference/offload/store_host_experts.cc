#include "inference/offload/store_host_experts.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace sy::offload {
namespace {

// One expert of `source` as a store extent: gate | up | down, back to back.
Status CopyExtent(HostExpertSource& source, ExpertKey key, std::byte* out) {
  SY_ASSIGN_OR_RETURN(HostExpert expert, source.Get(key));
  const size_t chunk_bytes = source.layout().chunk_bytes();
  for (const ExpertChunk c : kExpertChunks) {
    std::memcpy(out + static_cast<size_t>(c) * chunk_bytes, expert.chunk(c).data(), chunk_bytes);
  }
  return Status::Ok();
}

// Every expert of `source` into `store`, one WriteBatch (one publish) per MoE layer.
Status WriteAll(storage::ExpertStore& store, HostExpertSource& source) {
  const ExpertLayout& layout = source.layout();
  const size_t expert_bytes = layout.expert_bytes();
  std::vector<std::byte> buffer(expert_bytes * static_cast<size_t>(layout.num_experts));
  for (uint32_t m = 0; m < static_cast<uint32_t>(layout.num_layers); ++m) {
    std::vector<storage::ExpertStore::WriteRequest> requests;
    for (uint32_t e = 0; e < static_cast<uint32_t>(layout.num_experts); ++e) {
      std::byte* extent = buffer.data() + e * expert_bytes;
      SY_RETURN_IF_ERROR(CopyExtent(source, ExpertKey{m, e}, extent));
      requests.push_back({ExpertKey{m, e}, storage::ExtentKind::kWeights,
                          std::span<const std::byte>(extent, expert_bytes)});
    }
    std::mutex mutex;
    std::condition_variable done_cv;
    size_t done = 0;
    Status first_error;
    store.WriteBatch(requests, [&](size_t i, Result<uint64_t> generation) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!generation.ok() && first_error.ok()) {
        first_error = generation.status().WithContext(
            "writing expert " + requests[i].key.ToString() + " to " + store.path());
      }
      ++done;
      done_cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(mutex);
    done_cv.wait(lock, [&] { return done == requests.size(); });
    SY_RETURN_IF_ERROR(first_error);
  }
  return Status::Ok();
}

// A reused store must hold `layout`'s experts, every one written.
Status CheckStoreLayout(const storage::ExpertStore& store, const ExpertLayout& layout) {
  const std::string remove = "; remove " + store.path() + " to have it rewritten from the model";
  if (store.num_layers() != static_cast<uint32_t>(layout.num_layers) ||
      store.num_experts() != static_cast<uint32_t>(layout.num_experts)) {
    return InvalidArgumentError(store.path() + " holds " + std::to_string(store.num_layers()) +
                                " MoE layers x " + std::to_string(store.num_experts()) +
                                " experts, the model " + std::to_string(layout.num_layers) + " x " +
                                std::to_string(layout.num_experts) + remove);
  }
  Result<storage::KindInfo> kind = store.Kind(storage::ExtentKind::kWeights);
  if (!kind.ok()) return InvalidArgumentError(store.path() + " has no expert weights" + remove);
  const std::vector<uint64_t> want(kNumExpertChunks, layout.chunk_bytes());
  if (kind->part_bytes != want) {
    return InvalidArgumentError(store.path() + ": its expert extents are not three chunks of " +
                                std::to_string(layout.chunk_bytes()) + " bytes (" +
                                std::string(DTypeName(layout.dtype)) + " weights)" + remove);
  }
  for (uint32_t m = 0; m < store.num_layers(); ++m) {
    for (uint32_t e = 0; e < store.num_experts(); ++e) {
      SY_ASSIGN_OR_RETURN(uint64_t generation,
                          store.Generation(ExpertKey{m, e}, storage::ExtentKind::kWeights));
      if (generation == 0) {
        return NotFoundError(store.path() + " lacks expert " + ExpertKey{m, e}.ToString() +
                             " (an interrupted write?)" + remove);
      }
    }
  }
  return Status::Ok();
}

// The store's copy of `key` must equal the source's.
Status CheckSameExpert(HostExpertSource& stored, HostExpertSource& source, ExpertKey key,
                       const std::string& path) {
  SY_ASSIGN_OR_RETURN(HostExpert a, stored.Get(key));
  SY_ASSIGN_OR_RETURN(HostExpert b, source.Get(key));
  for (const ExpertChunk c : kExpertChunks) {
    if (std::memcmp(a.chunk(c).data(), b.chunk(c).data(), a.chunk(c).nbytes()) != 0) {
      return InvalidArgumentError(path + ": expert " + key.ToString() +
                                  " differs from the model's (a store of another model?); remove " +
                                  path + " to have it rewritten from the model");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ExpertStoreSpec> ParseExpertStoreSpec(std::string_view spec) {
  const size_t colon = spec.find(':');
  const std::string_view prefix = spec.substr(0, colon);
  ExpertStoreSpec out;
  if (colon != std::string_view::npos && colon + 1 < spec.size()) {
    out.path = std::string(spec.substr(colon + 1));
    if (prefix == "uring" || prefix == "io_uring") out.file_system = "io_uring";
    if (prefix == "pmem" || prefix == "posix" || prefix == "mem") out.file_system = prefix;
  }
  if (out.file_system.empty()) {
    return InvalidArgumentError("expert store \"" + std::string(spec) +
                                "\": expected uring:PATH, pmem:PATH or posix:PATH");
  }
  return out;
}

StoreHostExperts::~StoreHostExperts() = default;

Result<std::unique_ptr<StoreHostExperts>> StoreHostExperts::Open(
    const ExpertStoreSpec& spec, HostExpertSource& source, const StoreHostExpertsOptions& options) {
  if (options.host_cache_experts == 0) {
    return InvalidArgumentError("the host expert cache needs at least one slot");
  }
  const ExpertLayout& layout = source.layout();
  SY_RETURN_IF_ERROR(layout.Validate());
  std::unique_ptr<StoreHostExperts> tier(new StoreHostExperts());
  SY_ASSIGN_OR_RETURN(tier->fs_, storage::MakeFileSystem(spec.file_system));
  SY_ASSIGN_OR_RETURN(const bool exists, tier->fs_->Exists(spec.path));
  if (exists) {
    storage::StoreOptions store_options;
    store_options.verify_on_open = false;  // every read is verified instead
    SY_ASSIGN_OR_RETURN(tier->store_,
                        storage::ExpertStore::Open(tier->fs_.get(), spec.path, store_options));
    SY_RETURN_IF_ERROR(CheckStoreLayout(*tier->store_, layout));
  } else {
    storage::StoreLayout store_layout;
    store_layout.num_layers = static_cast<uint32_t>(layout.num_layers);
    store_layout.num_experts = static_cast<uint32_t>(layout.num_experts);
    store_layout.kinds.push_back(
        storage::KindSpec{storage::ExtentKind::kWeights,
                          {layout.chunk_bytes(), layout.chunk_bytes(), layout.chunk_bytes()},
                          /*spare_extents=*/-1});
    SY_ASSIGN_OR_RETURN(tier->store_,
                        storage::ExpertStore::Create(tier->fs_.get(), spec.path, store_layout));
    SY_RETURN_IF_ERROR(WriteAll(*tier->store_, source));
    tier->created_ = true;
  }
  storage::CacheOptions cache_options;
  cache_options.num_slots = options.host_cache_experts;
  cache_options.kind = storage::ExtentKind::kWeights;
  cache_options.policy = options.policy;
  SY_ASSIGN_OR_RETURN(tier->cache_,
                      storage::ExpertCache::Create(tier->store_.get(), cache_options));
  SY_ASSIGN_OR_RETURN(tier->cached_, CachedHostExperts::Create(tier->cache_.get(), layout));
  if (!tier->created_) {
    const ExpertKey last{static_cast<uint32_t>(layout.num_layers - 1),
                         static_cast<uint32_t>(layout.num_experts - 1)};
    SY_RETURN_IF_ERROR(CheckSameExpert(*tier->cached_, source, ExpertKey{0, 0}, spec.path));
    SY_RETURN_IF_ERROR(CheckSameExpert(*tier->cached_, source, last, spec.path));
  }
  return tier;
}

storage::CacheStats StoreHostExperts::cache_stats() const { return cache_->stats(); }

}  // namespace sy::offload
