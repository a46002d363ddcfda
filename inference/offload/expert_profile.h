// ExpertProfile: how often each routed expert was used, from an offline run; the input of the
// static-by-popularity placements (Fiddler's initial placement: cpu-compute; the `static`
// device cache; ExpertPolicyOptions::profile).
//
// File format (JSON, one object; docs/offload.md, "Expert profile"):
//   {
//     "format": "switchyard-expert-profile",   optional; when present it must be this string
//     "num_moe_layers": 2,                      MoE layers (ExpertKey::layer is the MoE index)
//     "num_experts": 8,                         routed experts per MoE layer
//     "counts": [[120, 3, 0, 41, 9, 9, 0, 2],   counts[m][e]: tokens routed to expert e of MoE
//                [ 17, 88, 5, 0, 60, 1, 30, 7]] layer m; non-negative integers up to 2^53
//   }
// Unknown keys are refused (a misspelt field would otherwise be ignored silently).
//
// Ownership: ExpertProfile is a value type. Thread-safety: a value type; the functions are pure
// (LoadExpertProfile reads one file).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "inference/offload/expert_layout.h"
#include "runtime/core/status.h"

namespace sy::offload {

inline constexpr std::string_view kExpertProfileFormat = "switchyard-expert-profile";

struct ExpertProfile {
  int num_layers = 0;
  int num_experts = 0;
  std::vector<std::vector<int64_t>> counts;  // [num_layers][num_experts]

  // An all-zero profile of `layout`'s shape.
  static ExpertProfile Empty(const ExpertLayout& layout);
  // Adds one layer run (group_rows[e] = rows routed to expert e of MoE layer `layer`).
  void Add(int layer, std::span<const int64_t> group_rows);
  // InvalidArgument naming `file` when the shape differs from `layout`'s.
  Status CheckMatches(const ExpertLayout& layout, std::string_view file) const;
  // Every expert, most used first; ties by (layer, expert) ascending.
  std::vector<ExpertKey> Popular() const;
  // The file format above.
  std::string ToJson() const;
};

// Parses the format above. InvalidArgument naming `file` and the field ("counts[1][3]: must be a
// non-negative integer, got -2").
Result<ExpertProfile> ParseExpertProfile(std::string_view text, std::string_view file);
// Reads and parses `path` (at most 64 MiB). NotFound when it does not exist.
Result<ExpertProfile> LoadExpertProfile(const std::string& path);

// The static placement a policy uses when it has no profile: expert 0 of every MoE layer, then
// expert 1 of every layer, and so on (uniform over layers; as good as any on random routing).
std::vector<ExpertKey> UniformPlacement(const ExpertLayout& layout);

// Every expert of `layout` in static-placement order: the profile at `profile_path`, most used
// first (checked against the layout), or UniformPlacement when the path is empty.
Result<std::vector<ExpertKey>> StaticPlacementOrder(const ExpertLayout& layout,
                                                    const std::string& profile_path);

}  // namespace sy::offload
