#include "runtime/config/config_schema.h"

#include "runtime/config/edit_distance.h"

namespace sy::internal {

Status ConfigKeyError(const Config& config, const std::string& key, const std::string& tail) {
  return InvalidArgumentError(config.Where(key) + ": '" + key + "' " + tail);
}

Status ConfigUnknownKeyError(const Config& config, const std::string& key,
                             const std::vector<std::string>& candidates,
                             const std::vector<std::string>& level_keys, const std::string& block) {
  std::string message = config.Where(key) + ": unknown key '" + key + "'";
  if (std::optional<std::string> nearest = NearestMatch(key, candidates)) {
    message += "; did you mean '" + *nearest + "'?";
  } else if (level_keys.empty()) {
    message += "; '" + block + "' takes no keys";
  } else {
    message += "; the keys of '" + block + "' are:";
    for (size_t i = 0; i < level_keys.size(); ++i) {
      message += (i == 0 ? " " : ", ") + level_keys[i];
    }
  }
  return InvalidArgumentError(std::move(message));
}

Status ConfigEnumError(const Config& config, const std::string& key, const nlohmann::json& value,
                       const std::vector<std::string>& spellings) {
  std::string expected = "one of";
  for (size_t i = 0; i < spellings.size(); ++i) {
    expected += (i == 0 ? " \"" : ", \"") + spellings[i] + "\"";
  }
  std::string tail = ExpectedButGot(expected, value);
  if (value.is_string()) {
    if (auto nearest = NearestMatch(value.get<std::string>(), spellings)) {
      tail += "; did you mean \"" + *nearest + "\"?";
    }
  }
  return ConfigKeyError(config, key, tail);
}

std::string JoinConfigKey(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

}  // namespace sy::internal
