#include "inference/gguf_tokenizer.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "inference/tokenizer.h"
#include "storage/formats/text_file.h"

namespace sy {
namespace {

using nlohmann::json;
using storage::GgufKeyValue;
using storage::GgufValue;
using storage::GgufValueType;

Result<json> ParseOptionalJson(const std::map<std::string, std::string>& files,
                               const std::string& name, const std::string& source) {
  const auto it = files.find(name);
  if (it == files.end()) return json::object();
  SY_ASSIGN_OR_RETURN(json j, storage::ParseStrictJson(it->second, source + "/" + name, name));
  if (!j.is_object()) return InvalidArgumentError(source + "/" + name + " is not a JSON object");
  return j;
}

// tokenizer_config.json's "<kind>_token": a string, or an added-token object with "content".
std::optional<std::string> SpecialTokenText(const json& tokenizer_config, const std::string& kind) {
  const std::string key = kind + "_token";
  if (!tokenizer_config.contains(key)) return std::nullopt;
  const json& t = tokenizer_config[key];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_object() && t.contains("content") && t["content"].is_string()) {
    return t["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<GgufKeyValue>> GgufTokenizerMetadata(
    const std::map<std::string, std::string>& files, int64_t vocab_size,
    const std::string& source) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (const auto spm = files.find("tokenizer.model"); spm != files.end()) {
    SY_ASSIGN_OR_RETURN(tokenizer,
                        ParseSentencePieceModel(spm->second, source + "/tokenizer.model"));
  } else if (const auto hf = files.find("tokenizer.json"); hf != files.end()) {
    SY_ASSIGN_OR_RETURN(tokenizer, ParseHfTokenizerJson(hf->second, source + "/tokenizer.json"));
  } else {
    return std::vector<GgufKeyValue>{};
  }
  SY_ASSIGN_OR_RETURN(TokenizerVocabulary vocab, tokenizer->Vocabulary());
  const bool spm = vocab.model == "llama";
  const std::string file = source + (spm ? "/tokenizer.model" : "/tokenizer.json");
  const auto n = static_cast<int64_t>(vocab.tokens.size());
  if (n > vocab_size) {
    for (int64_t id = vocab_size; id < n; ++id) {
      if (vocab.types[static_cast<size_t>(id)] != TokenizerVocabulary::kUnused) {
        return InvalidArgumentError(file + ": token " + std::to_string(id) + " (" +
                                    storage::Quote(vocab.tokens[static_cast<size_t>(id)]) +
                                    ") is outside the model's vocab_size " +
                                    std::to_string(vocab_size) +
                                    "; the tokenizer does not belong to this model");
      }
    }
  }
  std::vector<GgufValue> tokens, scores, types;
  for (int64_t id = 0; id < vocab_size; ++id) {
    const auto i = static_cast<size_t>(id);
    const bool have = id < n && !vocab.tokens[i].empty();
    tokens.push_back(GgufValue::String(have ? vocab.tokens[i] : "[PAD" + std::to_string(id) + "]"));
    types.push_back(GgufValue::I32(have ? vocab.types[i] : TokenizerVocabulary::kUnused));
    if (spm) scores.push_back(GgufValue::F32(have ? vocab.scores[i] : -10000.0f));
  }

  std::vector<GgufKeyValue> kv;
  kv.push_back({"tokenizer.ggml.model", GgufValue::String(vocab.model)});
  kv.push_back({"tokenizer.ggml.pre", GgufValue::String(vocab.pre)});
  kv.push_back(
      {"tokenizer.ggml.tokens", GgufValue::Array(GgufValueType::kString, std::move(tokens))});
  if (spm) {
    kv.push_back(
        {"tokenizer.ggml.scores", GgufValue::Array(GgufValueType::kF32, std::move(scores))});
  }
  kv.push_back(
      {"tokenizer.ggml.token_type", GgufValue::Array(GgufValueType::kI32, std::move(types))});
  if (!spm) {
    std::vector<GgufValue> merges;
    merges.reserve(vocab.merges.size());
    for (std::string& m : vocab.merges) merges.push_back(GgufValue::String(std::move(m)));
    kv.push_back(
        {"tokenizer.ggml.merges", GgufValue::Array(GgufValueType::kString, std::move(merges))});
  }

  SY_ASSIGN_OR_RETURN(json tokenizer_config,
                      ParseOptionalJson(files, "tokenizer_config.json", source));
  SY_ASSIGN_OR_RETURN(json config, ParseOptionalJson(files, "config.json", source));
  struct Special {
    const char* kind;  // tokenizer_config.json's "<kind>_token", config.json's "<kind>_token_id"
    const char* key;   // tokenizer.ggml.<key>_token_id
    int32_t model_id;  // the SentencePiece model's own
  };
  const Special specials[] = {{"bos", "bos", vocab.bos_id},
                              {"eos", "eos", vocab.eos_id},
                              {"unk", "unknown", vocab.unk_id},
                              {"pad", "padding", vocab.pad_id}};
  for (const Special& s : specials) {
    std::optional<int64_t> id;
    if (const std::optional<std::string> text = SpecialTokenText(tokenizer_config, s.kind)) {
      for (int64_t k = 0; k < n && !id; ++k) {
        if (vocab.tokens[static_cast<size_t>(k)] == *text) id = k;
      }
    }
    const std::string id_key = std::string(s.kind) + "_token_id";
    if (!id && config.contains(id_key) && config[id_key].is_number_integer()) {
      id = config[id_key].get<int64_t>();
    }
    if (!id && s.model_id >= 0) id = s.model_id;
    if (!id) continue;
    if (*id < 0 || *id >= vocab_size) {
      return InvalidArgumentError(source + ": the " + s.kind + " token id " + std::to_string(*id) +
                                  " is outside the vocabulary of " + std::to_string(vocab_size));
    }
    kv.push_back({"tokenizer.ggml." + std::string(s.key) + "_token_id",
                  GgufValue::U32(static_cast<uint32_t>(*id))});
  }
  for (const char* flag : {"add_bos_token", "add_eos_token"}) {
    if (tokenizer_config.contains(flag) && tokenizer_config[flag].is_boolean()) {
      kv.push_back({"tokenizer.ggml." + std::string(flag),
                    GgufValue::Bool(tokenizer_config[flag].get<bool>())});
    }
  }
  if (spm)
    kv.push_back({"tokenizer.ggml.add_space_prefix", GgufValue::Bool(vocab.add_space_prefix)});
  return kv;
}

}  // namespace sy
