#include "inference/tokenizer_config.h"

#include <nlohmann/json.hpp>

namespace sy {

Result<std::optional<std::string>> ChatTemplateSource(const nlohmann::json& tokenizer_config,
                                                      const std::string& where) {
  if (!tokenizer_config.is_object()) return std::optional<std::string>();
  const auto it = tokenizer_config.find("chat_template");
  if (it == tokenizer_config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (!it->is_array()) {
    return InvalidArgumentError(where + ": chat_template is neither a string nor a list");
  }
  for (const nlohmann::json& named : *it) {
    if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
        named["template"].is_string()) {
      return std::optional<std::string>(named["template"].get<std::string>());
    }
  }
  return InvalidArgumentError(where + ": chat_template is a list without a template named " +
                              "\"default\"");
}

std::optional<std::string> SpecialTokenText(const nlohmann::json& tokenizer_config,
                                            std::string_view key) {
  if (!tokenizer_config.is_object()) return std::nullopt;
  const auto it = tokenizer_config.find(std::string(key));
  if (it == tokenizer_config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace sy
