#include "inference/offload/expert_profile.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/core/check.h"
#include "runtime/core/read_file.h"
#include "storage/formats/text_file.h"

namespace sy::offload {
namespace {

using nlohmann::json;

constexpr size_t kMaxProfileBytes = size_t{64} << 20;
constexpr int64_t kMaxCount = int64_t{1} << 53;
constexpr int64_t kMaxDimension = 1 << 20;  // layers or experts: far past any model

std::string Describe(const json& value) {
  std::string dumped = value.dump();
  if (dumped.size() > 40) dumped = dumped.substr(0, 37) + "...";
  return std::string(value.type_name()) + " " + dumped;
}

Status FieldError(std::string_view file, const std::string& field, const std::string& what) {
  return InvalidArgumentError(std::string(file) + ": " + field + ": " + what);
}

// A non-negative integer no larger than `max` (integral floats such as 1e3 accepted).
Result<int64_t> ReadCount(const json& value, std::string_view file, const std::string& field,
                          int64_t max) {
  int64_t v = -1;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    v = u > static_cast<uint64_t>(max) ? -2 : static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    // Range first: converting a double outside int64's range is undefined (NaN fails both).
    if (d >= 0 && d <= static_cast<double>(max) && d == std::floor(d)) {
      v = static_cast<int64_t>(d);
    } else if (d > static_cast<double>(max)) {
      v = -2;
    }
  }
  if (v == -2 || v > max) {
    return FieldError(file, field,
                      "must be at most " + std::to_string(max) + ", got " + Describe(value));
  }
  if (v < 0) {
    return FieldError(file, field, "must be a non-negative integer, got " + Describe(value));
  }
  return v;
}

}  // namespace

ExpertProfile ExpertProfile::Empty(const ExpertLayout& layout) {
  ExpertProfile profile;
  profile.num_layers = layout.num_layers;
  profile.num_experts = layout.num_experts;
  profile.counts.assign(static_cast<size_t>(layout.num_layers),
                        std::vector<int64_t>(static_cast<size_t>(layout.num_experts), 0));
  return profile;
}

void ExpertProfile::Add(int layer, std::span<const int64_t> group_rows) {
  SY_CHECK(layer >= 0 && layer < num_layers) << "ExpertProfile::Add: layer " << layer;
  SY_CHECK_EQ(static_cast<int>(group_rows.size()), num_experts) << "ExpertProfile::Add: groups";
  for (size_t e = 0; e < group_rows.size(); ++e) counts[layer][e] += group_rows[e];
}

Status ExpertProfile::CheckMatches(const ExpertLayout& layout, std::string_view file) const {
  if (num_layers != layout.num_layers) {
    return FieldError(file, "num_moe_layers",
                      "is " + std::to_string(num_layers) + " but the model has " +
                          std::to_string(layout.num_layers) +
                          " MoE layers; was the profile recorded on another model?");
  }
  if (num_experts != layout.num_experts) {
    return FieldError(file, "num_experts",
                      "is " + std::to_string(num_experts) + " but the model has " +
                          std::to_string(layout.num_experts) +
                          " routed experts per MoE layer; was the profile recorded on another "
                          "model?");
  }
  return Status::Ok();
}

std::vector<ExpertKey> ExpertProfile::Popular() const {
  std::vector<ExpertKey> keys;
  for (int m = 0; m < num_layers; ++m) {
    for (int e = 0; e < num_experts; ++e) {
      keys.push_back({static_cast<uint32_t>(m), static_cast<uint32_t>(e)});
    }
  }
  std::stable_sort(keys.begin(), keys.end(), [this](const ExpertKey& a, const ExpertKey& b) {
    return counts[a.layer][a.expert] > counts[b.layer][b.expert];
  });
  return keys;
}

std::string ExpertProfile::ToJson() const {
  json root = json::object();
  root["format"] = kExpertProfileFormat;
  root["num_moe_layers"] = num_layers;
  root["num_experts"] = num_experts;
  root["counts"] = counts;
  return root.dump();
}

Result<ExpertProfile> ParseExpertProfile(std::string_view text, std::string_view file) {
  SY_ASSIGN_OR_RETURN(json root, storage::ParseStrictJson(text, file, "an expert profile"));
  if (!root.is_object()) {
    return InvalidArgumentError(std::string(file) +
                                ": an expert profile must be a JSON object, got " + Describe(root));
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() != "format" && it.key() != "num_moe_layers" && it.key() != "num_experts" &&
        it.key() != "counts") {
      return FieldError(file, storage::Quote(it.key()),
                        "unknown field; an expert profile has format, num_moe_layers, "
                        "num_experts and counts");
    }
  }
  if (auto it = root.find("format"); it != root.end()) {
    if (!it->is_string() || it->get<std::string>() != kExpertProfileFormat) {
      return FieldError(
          file, "format",
          "must be \"" + std::string(kExpertProfileFormat) + "\", got " + Describe(*it));
    }
  }
  ExpertProfile profile;
  for (const char* field : {"num_moe_layers", "num_experts", "counts"}) {
    if (!root.contains(field)) return FieldError(file, field, "is missing");
  }
  SY_ASSIGN_OR_RETURN(const int64_t layers,
                      ReadCount(root["num_moe_layers"], file, "num_moe_layers", kMaxDimension));
  SY_ASSIGN_OR_RETURN(const int64_t experts,
                      ReadCount(root["num_experts"], file, "num_experts", kMaxDimension));
  if (layers < 1) return FieldError(file, "num_moe_layers", "must be at least 1");
  if (experts < 1) return FieldError(file, "num_experts", "must be at least 1");
  profile.num_layers = static_cast<int>(layers);
  profile.num_experts = static_cast<int>(experts);
  const json& counts = root["counts"];
  if (!counts.is_array() || static_cast<int64_t>(counts.size()) != layers) {
    return FieldError(file, "counts",
                      "must be an array of num_moe_layers (" + std::to_string(layers) +
                          ") arrays, got " + Describe(counts));
  }
  profile.counts.resize(static_cast<size_t>(layers));
  for (int64_t m = 0; m < layers; ++m) {
    const std::string row_field = "counts[" + std::to_string(m) + "]";
    const json& row = counts[static_cast<size_t>(m)];
    if (!row.is_array() || static_cast<int64_t>(row.size()) != experts) {
      return FieldError(file, row_field,
                        "must be an array of num_experts (" + std::to_string(experts) +
                            ") counts, got " + Describe(row));
    }
    for (int64_t e = 0; e < experts; ++e) {
      SY_ASSIGN_OR_RETURN(const int64_t v,
                          ReadCount(row[static_cast<size_t>(e)], file,
                                    row_field + "[" + std::to_string(e) + "]", kMaxCount));
      profile.counts[static_cast<size_t>(m)].push_back(v);
    }
  }
  return profile;
}

Result<ExpertProfile> LoadExpertProfile(const std::string& path) {
  SY_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxProfileBytes, "an expert profile"));
  return ParseExpertProfile(text, path);
}

std::vector<ExpertKey> UniformPlacement(const ExpertLayout& layout) {
  std::vector<ExpertKey> keys;
  for (int e = 0; e < layout.num_experts; ++e) {
    for (int m = 0; m < layout.num_layers; ++m) {
      keys.push_back({static_cast<uint32_t>(m), static_cast<uint32_t>(e)});
    }
  }
  return keys;
}

Result<std::vector<ExpertKey>> StaticPlacementOrder(const ExpertLayout& layout,
                                                    const std::string& profile_path) {
  if (profile_path.empty()) return UniformPlacement(layout);
  SY_ASSIGN_OR_RETURN(const ExpertProfile profile, LoadExpertProfile(profile_path));
  SY_RETURN_IF_ERROR(profile.CheckMatches(layout, profile_path));
  return profile.Popular();
}

}  // namespace sy::offload
