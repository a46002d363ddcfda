#include "inference/expert_policy.h"

#include <array>
#include <string>
#include <vector>

#include "inference/offload/cpu_compute_expert_provider.h"
#include "inference/offload/hot_cold_expert_provider.h"
#include "inference/offload/layer_split_expert_provider.h"
#include "inference/offload/ondemand_expert_provider.h"
#include "inference/offload/predictive_expert_provider.h"
#include "inference/offload/prefetch_all_expert_provider.h"
#include "inference/offload/pregated_expert_provider.h"
#include "inference/offload/ring_expert_provider.h"
#include "inference/resident_expert_provider.h"

namespace sy {
namespace {

constexpr std::array<std::string_view, 9> kPolicies = {"resident",    "ondemand", "prefetch-all",
                                                       "ring",        "pregated", "predictive",
                                                       "cpu-compute", "hot-cold", "layer-split"};

}  // namespace

namespace {

// The ablation variants `bench infer` compares a policy with (docs/offload.md, "Variants").
struct PolicyVariant {
  std::string_view policy;
  std::string_view variant;
  std::string_view meaning;
};
constexpr std::array<PolicyVariant, 6> kVariants = {{
    {"predictive", "lru", "no prediction: the gate's experts on demand through the LRU cache"},
    {"predictive", "prefetch",
     "predicted experts prefetched as LOW, nothing cancelled, gate order"},
    {"predictive", "preempt", "prefetch + early preemption (stale LOW dropped), gate order"},
    {"predictive", "reorder", "prefetch + preemption + readiness order (the full policy)"},
    {"hot-cold", "all-copy", "every active expert copied to the device (H = active)"},
    {"hot-cold", "all-cpu", "every expert not resident runs on the CPU (H = 0)"},
}};

std::string VariantList() {
  std::string list;
  for (const PolicyVariant& v : kVariants) {
    list += (list.empty() ? "" : ", ") + std::string(v.policy) + ":" + std::string(v.variant);
  }
  return list;
}

}  // namespace

std::span<const std::string_view> ExpertPolicyNames() { return kPolicies; }

std::vector<std::string> ExpertPolicyVariants() {
  std::vector<std::string> specs;
  for (const PolicyVariant& v : kVariants) {
    specs.push_back(std::string(v.policy) + ":" + std::string(v.variant));
  }
  return specs;
}

std::string ExpertPolicyList() {
  std::string list;
  for (const std::string_view name : kPolicies) {
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  return list;
}

Result<std::unique_ptr<ExpertProvider>> MakeExpertProvider(std::string_view spec,
                                                           const ExpertPolicyOptions& options) {
  // NAME or NAME:VARIANT.
  const size_t colon = spec.find(':');
  const std::string_view policy = spec.substr(0, colon);
  const std::string_view variant = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  if (colon != std::string_view::npos) {
    bool known = false;
    for (const PolicyVariant& v : kVariants)
      known = known || (v.policy == policy && v.variant == variant);
    if (!known) {
      return InvalidArgumentError("unknown expert policy variant '" + std::string(spec) +
                                  "'; valid variants: " + VariantList());
    }
  }
  if (policy == "resident") {
    return std::unique_ptr<ExpertProvider>(std::make_unique<ResidentExpertProvider>());
  }
  if (policy == "ondemand") {
    // MoE-OnDemand: no device cache, every activated expert fetched when the gate asks for it.
    offload::OnDemandOptions ondemand;
    if (options.device_slots > 0) ondemand.num_slots = options.device_slots;
    if (!options.device_cache.empty()) {
      SY_ASSIGN_OR_RETURN(ondemand.cache_policy,
                          offload::ParseDeviceCachePolicy(options.device_cache));
    }
    return std::unique_ptr<ExpertProvider>(
        std::make_unique<offload::OnDemandExpertProvider>(ondemand));
  }
  if (policy == "prefetch-all") {
    // SE-MoE's MoE-Prefetch: every expert of MoE layer m + 1 while m runs; 2 * E slots.
    offload::PrefetchAllOptions prefetch;
    prefetch.num_slots = options.device_slots;
    if (!options.device_cache.empty()) {
      SY_ASSIGN_OR_RETURN(prefetch.cache_policy,
                          offload::ParseDeviceCachePolicy(options.device_cache));
    }
    return std::unique_ptr<ExpertProvider>(
        std::make_unique<offload::PrefetchAllExpertProvider>(prefetch));
  }
  if (policy == "ring") {
    // MoESys ring memory: K = 2 expert layers, or device_slots / E.
    offload::RingOptions ring;
    ring.num_slots = options.device_slots;
    if (!options.device_cache.empty()) {
      SY_ASSIGN_OR_RETURN(ring.cache_policy, offload::ParseDeviceCachePolicy(options.device_cache));
    }
    return std::unique_ptr<ExpertProvider>(std::make_unique<offload::RingExpertProvider>(ring));
  }
  if (policy == "pregated") {
    // Pre-gated MoE: block m + 1's exact experts while block m runs; 2 * E slots at most.
    offload::PregatedOptions pregated;
    pregated.num_slots = options.device_slots;
    if (!options.device_cache.empty()) {
      SY_ASSIGN_OR_RETURN(pregated.cache_policy,
                          offload::ParseDeviceCachePolicy(options.device_cache));
    }
    return std::unique_ptr<ExpertProvider>(
        std::make_unique<offload::PregatedExpertProvider>(pregated));
  }
  if (policy == "predictive") {
    // ProMoE: predicted experts of m + stride as LOW, the gate's as HIGH, stale LOW dropped,
    // experts run in readiness order. The skip-gate predictor unless a predictor file is given.
    offload::PredictiveOptions predictive;
    if (options.device_slots > 0) predictive.num_slots = options.device_slots;
    if (!options.device_cache.empty()) {
      SY_ASSIGN_OR_RETURN(predictive.cache_policy,
                          offload::ParseDeviceCachePolicy(options.device_cache));
    }
    const int stride = options.predictor_stride;
    if (stride != 0 && stride != 1 && stride != 2) {
      return InvalidArgumentError("predictor stride " + std::to_string(stride) +
                                  " is not supported; use 1 or 2");
    }
    if (stride != 0) predictive.stride = stride;
    if (!variant.empty()) {
      predictive.prefetch = variant != "lru";
      predictive.early_preemption = variant == "preempt" || variant == "reorder";
      predictive.reorder = variant == "reorder";
    }
    if (!options.predictor.empty()) {
      SY_ASSIGN_OR_RETURN(std::unique_ptr<offload::MlpPredictor> mlp,
                          offload::LoadMlpPredictor(options.predictor));
      if (stride != 0 && mlp->stride() != stride) {
        return InvalidArgumentError("predictor file " + options.predictor + " has stride " +
                                    std::to_string(mlp->stride()) + ", not the " +
                                    std::to_string(stride) + " asked for");
      }
      predictive.predictor = std::move(mlp);
    }
    return std::unique_ptr<ExpertProvider>(
        std::make_unique<offload::PredictiveExpertProvider>(std::move(predictive)));
  }
  if (policy == "cpu-compute") {
    // Fiddler: resident -> device; cpu(s) > device(s) + transfer -> fetch; else the CPU.
    // Static cache of the profile's popular experts; a quarter of the experts' slots by default.
    offload::CpuComputeOptions cpu_compute;
    cpu_compute.num_slots = options.device_slots;
    cpu_compute.profile = options.profile;
    if (!options.device_cache.empty()) {
      SY_ASSIGN_OR_RETURN(cpu_compute.cache_policy,
                          offload::ParseDeviceCachePolicy(options.device_cache));
    }
    return std::unique_ptr<ExpertProvider>(
        std::make_unique<offload::CpuComputeExpertProvider>(std::move(cpu_compute)));
  }
  if (policy == "hot-cold") {
    // MoNDE: the top H experts by rows copied to the device, the rest on the CPU.
    offload::HotColdOptions hot_cold;
    hot_cold.num_slots = options.device_slots;
    hot_cold.profile = options.profile;
    if (!variant.empty()) {
      // H clamps to [0, active]: alpha 0 gives none, a huge alpha every active expert.
      hot_cold.alpha = variant == "all-copy" ? 1e9 : 0.0;
      hot_cold.tune_alpha = false;
    }
    if (!options.device_cache.empty()) {
      SY_ASSIGN_OR_RETURN(hot_cold.cache_policy,
                          offload::ParseDeviceCachePolicy(options.device_cache));
    }
    return std::unique_ptr<ExpertProvider>(
        std::make_unique<offload::HotColdExpertProvider>(std::move(hot_cold)));
  }
  if (policy == "layer-split") {
    // llama.cpp's -ngl: the first whole MoE layers that fit on the device, the rest on the CPU.
    offload::LayerSplitOptions split;
    split.num_slots = options.device_slots;
    return std::unique_ptr<ExpertProvider>(
        std::make_unique<offload::LayerSplitExpertProvider>(split));
  }
  return InvalidArgumentError("unknown expert policy '" + std::string(spec) +
                              "'; valid policies: " + ExpertPolicyList() +
                              "; variants: " + VariantList());
}

}  // namespace sy
