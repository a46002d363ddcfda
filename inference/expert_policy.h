// Expert policies by name: the expert providers `switchyard generate --policy NAME` and
// `switchyard bench infer --policies` can make (inference/expert_provider.h; docs/offload.md).
//
// Ownership: MakeExpertProvider returns an owned, not yet installed provider. Thread-safety: pure
// functions.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inference/expert_provider.h"
#include "runtime/core/status.h"

namespace sy {

// The valid policy names, in the order the help text lists them.
std::span<const std::string_view> ExpertPolicyNames();
// Every NAME:VARIANT MakeExpertProvider takes (below), e.g. "predictive:prefetch".
std::vector<std::string> ExpertPolicyVariants();
// The names joined with ", " (for help texts and errors).
std::string ExpertPolicyList();

// What a policy may be tuned by. Each field's zero value means "the policy's default"; a policy
// ignores the fields it has no use for.
struct ExpertPolicyOptions {
  // Device expert slots (the device memory a policy may give to experts, in experts).
  // 0: the policy's default.
  int device_slots = 0;
  // Device cache policy of the slots: "", "none", "lru", "lfu", "lifo", "layer-lru" or "static".
  // "": the policy's own.
  std::string device_cache;
  // Expert popularity profile (a JSON file; static placements: `static` cache, cpu-compute,
  // hot-cold). "": the policy's fallback.
  std::string profile;
  // predictive: a predictor file written by `switchyard train-predictor`. "": the skip-gate
  // predictor (layer i's hidden state fed to gate i + stride).
  std::string predictor;
  int predictor_stride = 0;  // 1 or 2 layers ahead; 0: 1
};

// `policy` is a name, or NAME:VARIANT for an ablation the benchmarks compare the policy with:
// predictive:lru|prefetch|preempt|reorder (ProMoE's ablation: no prediction, prefetch alone, +
// early preemption, + reordering = the full policy) and hot-cold:all-copy|all-cpu (MoNDE's H rule
// against copying every active expert, or running every non-resident one on the CPU).
// InvalidArgument naming the valid policies and variants when `policy` is none of them.
Result<std::unique_ptr<ExpertProvider>> MakeExpertProvider(std::string_view policy,
                                                           const ExpertPolicyOptions& options = {});

}  // namespace sy
