#include "inference/offload/cached_host_experts.h"

#include <string>
#include <utility>

namespace sy::offload {

Result<std::unique_ptr<CachedHostExperts>> CachedHostExperts::Create(storage::ExpertCache* cache,
                                                                     const ExpertLayout& layout) {
  SY_RETURN_IF_ERROR(layout.Validate());
  if (cache->payload_bytes() != layout.expert_bytes()) {
    return InvalidArgumentError(
        "CachedHostExperts: the cache's extents hold " + std::to_string(cache->payload_bytes()) +
        " bytes, but an expert of the layout is gate | up | down = " +
        std::to_string(layout.expert_bytes()) + " bytes; create the store's kWeights kind with " +
        "three parts of " + std::to_string(layout.chunk_bytes()) + " bytes");
  }
  return std::unique_ptr<CachedHostExperts>(new CachedHostExperts(cache, layout));
}

Result<HostExpert> CachedHostExperts::Get(ExpertKey key) {
  if (!layout_.Contains(key)) {
    return InvalidArgumentError("CachedHostExperts::Get: " + key.ToString() +
                                " is outside the layout");
  }
  SY_ASSIGN_OR_RETURN(storage::CacheHandle handle, cache_->Acquire(key));
  auto pin = std::make_shared<storage::CacheHandle>(std::move(handle));
  std::span<std::byte> data = pin->data();
  // One buffer over the slot whose release drops the pin.
  auto buffer = std::make_shared<Buffer>(data.data(), data.size(), Device::Cpu(),
                                         [pin](void*, size_t) mutable { pin->Release(); });
  HostExpert expert;
  for (ExpertChunk c : kExpertChunks) {
    expert.chunks[static_cast<int>(c)] = Tensor(buffer, layout_.dtype, layout_.ChunkShape(c),
                                                static_cast<size_t>(c) * layout_.chunk_bytes());
  }
  return expert;
}

}  // namespace sy::offload
