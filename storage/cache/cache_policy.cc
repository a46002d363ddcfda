#include "storage/cache/cache_policy.h"

#include "storage/cache/lfu_policy.h"
#include "storage/cache/lru_policy.h"
#include "storage/cache/tinylfu_policy.h"

namespace sy::storage {

std::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kMoESysLfu:
      return "lfu";
    case PolicyKind::kLru:
      return "lru";
    case PolicyKind::kWTinyLfu:
      return "wtinylfu";
  }
  return "unknown";
}

Result<PolicyKind> ParsePolicyKind(std::string_view name) {
  if (name == "lfu" || name == "moesys-lfu") return PolicyKind::kMoESysLfu;
  if (name == "lru") return PolicyKind::kLru;
  if (name == "wtinylfu" || name == "w-tinylfu") return PolicyKind::kWTinyLfu;
  return InvalidArgumentError("unknown cache policy '" + std::string(name) +
                              "': expected lfu, lru or wtinylfu");
}

std::unique_ptr<CachePolicy> MakeCachePolicy(const PolicyOptions& options, size_t capacity) {
  switch (options.kind) {
    case PolicyKind::kMoESysLfu:
      return std::make_unique<MoESysLfuPolicy>(options.lfu);
    case PolicyKind::kLru:
      return std::make_unique<LruPolicy>();
    case PolicyKind::kWTinyLfu:
      return std::make_unique<WTinyLfuPolicy>(capacity);
  }
  return nullptr;
}

}  // namespace sy::storage
