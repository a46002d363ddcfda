#include "inference/gguf_tokenizer.h"

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <utility>

#include "inference/sentencepiece_proto.h"
#include "inference/tokenizer.h"
#include "inference/tokenizer_config.h"
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

// ---------------------------------------------------------------- reading the keys back

// What a GGUF says of its tokenizer.
struct GgufTokenizerKeys {
  TokenizerVocabulary vocab;
  std::optional<bool> add_bos, add_eos;
  std::optional<std::string> chat_template;
};

class KeyReader {
 public:
  KeyReader(const storage::GgufHeader& header, const std::string& file)
      : header_(header), file_(file) {}

  Status Error(const std::string& key, const std::string& what) const {
    return InvalidArgumentError(file_ + ": metadata key " + key + " " + what +
                                "; the GGUF's tokenizer metadata is corrupt (convert the model "
                                "again, or pass token ids with --prompt-ids)");
  }

  Result<std::optional<std::string>> String(const std::string& key) const {
    const GgufValue* v = header_.Find(key);
    if (v == nullptr) return std::optional<std::string>();
    if (v->type != GgufValueType::kString)
      return Error(key, "is " + v->Describe() + ", not a string");
    if (!IsValidUtf8(v->s)) return Error(key, "is not valid UTF-8");
    return std::optional<std::string>(v->s);
  }

  Result<std::optional<bool>> Bool(const std::string& key) const {
    const GgufValue* v = header_.Find(key);
    if (v == nullptr) return std::optional<bool>();
    if (v->type != GgufValueType::kBool) return Error(key, "is " + v->Describe() + ", not a bool");
    return std::optional<bool>(v->b);
  }

  // An id below `n`, or -1 when the key is absent.
  Result<int32_t> Id(const std::string& key, size_t n) const {
    const GgufValue* v = header_.Find(key);
    if (v == nullptr) return -1;
    uint64_t id = 0;
    if (!v->AsUint(&id) || id >= n) {
      return Error(key, "is " + v->Describe() + ", not a token id below the " + std::to_string(n) +
                            " tokens");
    }
    return static_cast<int32_t>(id);
  }

  // The elements of an array key of `type` (with `count` of them unless it is 0); null when the
  // key is absent.
  Result<const std::vector<GgufValue>*> Array(const std::string& key, GgufValueType type,
                                              size_t count) const {
    const GgufValue* v = header_.Find(key);
    if (v == nullptr) return static_cast<const std::vector<GgufValue>*>(nullptr);
    if (v->type != GgufValueType::kArray || v->array_type != type) {
      return Error(key, "is " + v->Describe() + ", not an array of " +
                            std::string(storage::GgufValueTypeName(type)));
    }
    if (count != 0 && v->array.size() != count) {
      return Error(key, "has " + std::to_string(v->array.size()) +
                            " elements, tokenizer.ggml.tokens has " + std::to_string(count));
    }
    return &v->array;
  }

 private:
  const storage::GgufHeader& header_;
  const std::string& file_;
};

Result<std::optional<GgufTokenizerKeys>> ReadTokenizerKeys(const storage::GgufHeader& header,
                                                           const std::string& file) {
  const KeyReader r(header, file);
  SY_ASSIGN_OR_RETURN(std::optional<std::string> model, r.String("tokenizer.ggml.model"));
  if (!model || *model == "none") return std::optional<GgufTokenizerKeys>();
  if (*model != "llama" && *model != "gpt2") {
    return UnimplementedError(file + ": tokenizer.ggml.model " + storage::Quote(*model) +
                              " is not supported (\"llama\": SentencePiece, \"gpt2\": byte-level "
                              "BPE); pass token ids with --prompt-ids");
  }
  const bool spm = *model == "llama";
  GgufTokenizerKeys keys;
  TokenizerVocabulary& v = keys.vocab;
  v.model = *model;
  SY_ASSIGN_OR_RETURN(std::optional<std::string> pre, r.String("tokenizer.ggml.pre"));
  v.pre = pre.value_or("default");

  SY_ASSIGN_OR_RETURN(const std::vector<GgufValue>* tokens,
                      r.Array("tokenizer.ggml.tokens", GgufValueType::kString, 0));
  if (tokens == nullptr || tokens->empty()) {
    return r.Error("tokenizer.ggml.tokens", "is missing or empty");
  }
  const size_t n = tokens->size();
  v.tokens.reserve(n);
  for (const GgufValue& t : *tokens) v.tokens.push_back(t.s);

  v.types.assign(n, TokenizerVocabulary::kNormal);
  SY_ASSIGN_OR_RETURN(const std::vector<GgufValue>* types,
                      r.Array("tokenizer.ggml.token_type", GgufValueType::kI32, n));
  for (size_t i = 0; types != nullptr && i < n; ++i) {
    const int64_t t = (*types)[i].i;
    if (t < 0 || t > TokenizerVocabulary::kByte) {
      return r.Error(
          "tokenizer.ggml.token_type",
          "[" + std::to_string(i) + "] is " + std::to_string(t) + ", not a token type (0 to 6)");
    }
    v.types[i] = t == 0 ? TokenizerVocabulary::kNormal : static_cast<int32_t>(t);
  }
  if (spm) {
    v.scores.assign(n, 0.0f);
    SY_ASSIGN_OR_RETURN(const std::vector<GgufValue>* scores,
                        r.Array("tokenizer.ggml.scores", GgufValueType::kF32, n));
    for (size_t i = 0; scores != nullptr && i < n; ++i) {
      v.scores[i] = static_cast<float>((*scores)[i].f);
    }
  }
  // Every token that is run (all of SentencePiece's pieces; a BPE's except unused ids) must be
  // UTF-8 and unique.
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t i = 0; i < n; ++i) {
    if (!spm && v.types[i] == TokenizerVocabulary::kUnused) continue;
    const std::string& t = v.tokens[i];
    if (t.empty() || !IsValidUtf8(t)) {
      return r.Error("tokenizer.ggml.tokens", "[" + std::to_string(i) + "] (" + storage::Quote(t) +
                                                  ") is empty or not valid UTF-8");
    }
    if (const auto [it, fresh] = seen.emplace(t, i); !fresh) {
      return r.Error("tokenizer.ggml.tokens", "[" + std::to_string(i) + "] (" + storage::Quote(t) +
                                                  ") repeats token " + std::to_string(it->second));
    }
  }
  if (!spm) {
    SY_ASSIGN_OR_RETURN(const std::vector<GgufValue>* merges,
                        r.Array("tokenizer.ggml.merges", GgufValueType::kString, 0));
    if (merges == nullptr) {
      return r.Error("tokenizer.ggml.merges", "is missing (a \"gpt2\" tokenizer needs its merges)");
    }
    v.merges.reserve(merges->size());
    for (size_t k = 0; k < merges->size(); ++k) {
      const std::string& m = (*merges)[k].s;
      const size_t space = m.find(' ');
      const bool ok = space != std::string::npos && m.find(' ', space + 1) == std::string::npos &&
                      seen.count(std::string_view(m).substr(0, space)) &&
                      seen.count(std::string_view(m).substr(space + 1)) &&
                      seen.count(m.substr(0, space) + m.substr(space + 1));
      if (!ok) {
        return r.Error("tokenizer.ggml.merges",
                       "[" + std::to_string(k) + "] (" + storage::Quote(m) +
                           ") is not two tokens, separated by one space, whose concatenation is "
                           "a token");
      }
      v.merges.push_back(m);
    }
  }
  SY_ASSIGN_OR_RETURN(v.bos_id, r.Id("tokenizer.ggml.bos_token_id", n));
  SY_ASSIGN_OR_RETURN(v.eos_id, r.Id("tokenizer.ggml.eos_token_id", n));
  SY_ASSIGN_OR_RETURN(v.unk_id, r.Id("tokenizer.ggml.unknown_token_id", n));
  SY_ASSIGN_OR_RETURN(v.pad_id, r.Id("tokenizer.ggml.padding_token_id", n));
  SY_ASSIGN_OR_RETURN(keys.add_bos, r.Bool("tokenizer.ggml.add_bos_token"));
  SY_ASSIGN_OR_RETURN(keys.add_eos, r.Bool("tokenizer.ggml.add_eos_token"));
  SY_ASSIGN_OR_RETURN(std::optional<bool> prefix, r.Bool("tokenizer.ggml.add_space_prefix"));
  v.add_space_prefix = prefix.value_or(spm);  // llama.cpp's default: on for SentencePiece only
  SY_ASSIGN_OR_RETURN(keys.chat_template, r.String("tokenizer.chat_template"));
  return std::optional<GgufTokenizerKeys>(std::move(keys));
}

std::string TokenizerConfigJson(const GgufTokenizerKeys& keys) {
  const TokenizerVocabulary& v = keys.vocab;
  json config = json::object();
  config["tokenizer_class"] = v.model == "llama" ? "LlamaTokenizer" : "PreTrainedTokenizerFast";
  const std::pair<const char*, int32_t> specials[] = {{"bos_token", v.bos_id},
                                                      {"eos_token", v.eos_id},
                                                      {"unk_token", v.unk_id},
                                                      {"pad_token", v.pad_id}};
  // null when the GGUF names none, so that writing a GGUF again adds none from config.json.
  for (const auto& [name, id] : specials) {
    config[name] = id >= 0 ? json(v.tokens[static_cast<size_t>(id)]) : json(nullptr);
  }
  if (keys.add_bos) config["add_bos_token"] = *keys.add_bos;
  if (keys.add_eos) config["add_eos_token"] = *keys.add_eos;
  if (v.model == "llama") {
    // transformers' LlamaTokenizer: the pieces as the model splits them (legacy), with the dummy
    // prefix the model has.
    config["add_prefix_space"] = v.add_space_prefix;
    config["legacy"] = true;
  }
  config["clean_up_tokenization_spaces"] = false;
  if (keys.chat_template) config["chat_template"] = *keys.chat_template;
  return config.dump(2);
}

}  // namespace

Result<std::map<std::string, std::string>> GgufTokenizerFiles(const storage::GgufHeader& header,
                                                              const std::string& file) {
  SY_ASSIGN_OR_RETURN(std::optional<GgufTokenizerKeys> keys, ReadTokenizerKeys(header, file));
  std::map<std::string, std::string> files;
  if (!keys) return files;
  if (keys->vocab.model == "llama") {
    files["tokenizer.model"] = SentencePieceModelProto(keys->vocab);
  } else {
    SY_ASSIGN_OR_RETURN(files["tokenizer.json"], HfTokenizerJson(keys->vocab, file));
  }
  files["tokenizer_config.json"] = TokenizerConfigJson(*keys);
  json generation = json::object();
  if (keys->vocab.bos_id >= 0) generation["bos_token_id"] = keys->vocab.bos_id;
  if (keys->vocab.eos_id >= 0) generation["eos_token_id"] = keys->vocab.eos_id;
  if (keys->vocab.pad_id >= 0) generation["pad_token_id"] = keys->vocab.pad_id;
  if (!generation.empty()) files["generation_config.json"] = generation.dump(2);
  return files;
}

Result<std::unique_ptr<Tokenizer>> GgufTokenizer(const storage::GgufHeader& header,
                                                 const std::string& file) {
  SY_ASSIGN_OR_RETURN(std::optional<GgufTokenizerKeys> keys, ReadTokenizerKeys(header, file));
  if (!keys) {
    return NotFoundError(file +
                         " has no tokenizer metadata (tokenizer.ggml.model); give token ids "
                         "instead of text (--prompt-ids, --ids)");
  }
  const std::string source = file + " (tokenizer.ggml.*)";
  if (keys->vocab.model == "llama") {
    return ParseSentencePieceModel(SentencePieceModelProto(keys->vocab), source);
  }
  SY_ASSIGN_OR_RETURN(std::string json_text, HfTokenizerJson(keys->vocab, file));
  return ParseHfTokenizerJson(json_text, source);
}

Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path) {
  SY_ASSIGN_OR_RETURN(std::unique_ptr<storage::GgufFile> gguf, storage::GgufFile::Open(path));
  return GgufTokenizer(gguf->header(), path);
}

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
    const std::string token_key = std::string(s.kind) + "_token";
    if (tokenizer_config.contains(token_key) && tokenizer_config[token_key].is_null()) continue;
    std::optional<int64_t> id;
    if (const std::optional<std::string> text = SpecialTokenText(tokenizer_config, token_key)) {
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
  SY_ASSIGN_OR_RETURN(std::optional<std::string> chat,
                      ChatTemplateSource(tokenizer_config, source + "/tokenizer_config.json"));
  if (chat) kv.push_back({"tokenizer.chat_template", GgufValue::String(*chat)});
  return kv;
}

}  // namespace sy
