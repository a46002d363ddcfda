#include "inference/tokenizer_round_trip.h"

#include <nlohmann/json.hpp>

#include "runtime/core/read_file.h"
#include "storage/formats/text_file.h"

namespace sy {

Result<std::vector<std::string>> ReadTextList(const std::string& path) {
  SY_ASSIGN_OR_RETURN(std::string text, ReadFile(path, size_t{64} << 20, "a JSON text list"));
  SY_ASSIGN_OR_RETURN(nlohmann::json list, storage::ParseStrictJson(text, path, "the text list"));
  if (!list.is_array()) return InvalidArgumentError(path + ": not a JSON array");
  std::vector<std::string> texts;
  for (const nlohmann::json& item : list) {
    if (!item.is_string()) return InvalidArgumentError(path + ": not all strings");
    texts.push_back(item.get<std::string>());
  }
  return texts;
}

Result<std::vector<TokenizedText>> RoundTripTexts(const Tokenizer& tokenizer,
                                                  std::span<const std::string> texts) {
  std::vector<TokenizedText> out;
  out.reserve(texts.size());
  for (const std::string& text : texts) {
    TokenizedText t;
    SY_ASSIGN_OR_RETURN(t.ids, tokenizer.Encode(text));
    SY_ASSIGN_OR_RETURN(t.decoded, tokenizer.Decode(t.ids));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace sy
