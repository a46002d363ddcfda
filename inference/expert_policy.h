// Expert policies by name: the expert providers `switchyard generate --policy NAME` can make
// (inference/expert_provider.h). Today: `resident` (every expert on the device) and `ondemand`
// (gate, then fetch each activated expert into a device slot, then run; docs/offload.md).
//
// Ownership: MakeExpertProvider returns an owned, not yet installed provider. Thread-safety: pure
// functions.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "inference/expert_provider.h"
#include "runtime/core/status.h"

namespace sy {

// The valid policy names, in the order the help text lists them.
std::span<const std::string_view> ExpertPolicyNames();
// The names joined with ", " (for help texts and errors).
std::string ExpertPolicyList();

// InvalidArgument naming the valid policies when `policy` is none of them.
Result<std::unique_ptr<ExpertProvider>> MakeExpertProvider(std::string_view policy);

}  // namespace sy
