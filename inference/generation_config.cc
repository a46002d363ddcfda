#include "inference/generation_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "inference/gguf_model.h"
#include "inference/gguf_tokenizer.h"
#include "inference/tokenizer_config.h"
#include "runtime/core/read_file.h"
#include "storage/formats/text_file.h"

namespace sy {
namespace {

constexpr size_t kMaxConfigBytes = 64u << 20;

// The file's JSON object, or null JSON when the file does not exist.
Result<nlohmann::json> ReadJsonIfPresent(const std::string& path, const char* what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return nlohmann::json();
  SY_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kMaxConfigBytes, what));
  SY_ASSIGN_OR_RETURN(nlohmann::json root, storage::ParseStrictJson(text, path, what));
  if (!root.is_object()) return InvalidArgumentError(path + ": " + what + " is not an object");
  return root;
}

// "eos_token_id" of `root` as ids; nullopt when absent or null.
Result<std::optional<std::vector<int32_t>>> EosIds(const nlohmann::json& root,
                                                   const std::string& path, int64_t vocab_size) {
  if (!root.is_object()) return std::optional<std::vector<int32_t>>();
  auto it = root.find("eos_token_id");
  if (it == root.end() || it->is_null()) return std::optional<std::vector<int32_t>>();
  std::vector<int32_t> ids;
  const nlohmann::json list = it->is_array() ? *it : nlohmann::json::array({*it});
  for (const nlohmann::json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return InvalidArgumentError(path + ": eos_token_id " + id.dump() +
                                  " is not a token id of this model (vocab_size " +
                                  std::to_string(vocab_size) + ")");
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return std::optional<std::vector<int32_t>>(std::move(ids));
}

}  // namespace

Result<std::vector<int32_t>> LoadEosTokenIds(const std::string& dir, const Tokenizer* tokenizer,
                                             int64_t vocab_size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (IsGgufPath(dir)) {  // the generation_config.json its tokenizer.ggml.*_token_id keys give
    SY_ASSIGN_OR_RETURN(std::unique_ptr<storage::GgufFile> gguf, storage::GgufFile::Open(dir));
    SY_ASSIGN_OR_RETURN(auto files, GgufTokenizerFiles(gguf->header(), dir));
    const auto it = files.find("generation_config.json");
    if (it == files.end()) return std::vector<int32_t>();
    SY_ASSIGN_OR_RETURN(nlohmann::json root,
                        storage::ParseStrictJson(it->second, dir, "generation_config.json"));
    SY_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> ids, EosIds(root, dir, vocab_size));
    return ids.value_or(std::vector<int32_t>());
  }
  if (!fs::is_directory(dir, ec)) return std::vector<int32_t>();
  for (const char* file : {"generation_config.json", "config.json"}) {
    const std::string path = (fs::path(dir) / file).string();
    SY_ASSIGN_OR_RETURN(nlohmann::json root, ReadJsonIfPresent(path, file));
    SY_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> ids, EosIds(root, path, vocab_size));
    if (ids.has_value()) return std::move(*ids);
  }
  if (tokenizer == nullptr) return std::vector<int32_t>();
  const std::string path = (fs::path(dir) / "tokenizer_config.json").string();
  SY_ASSIGN_OR_RETURN(nlohmann::json root, ReadJsonIfPresent(path, "tokenizer_config.json"));
  if (!root.is_object()) return std::vector<int32_t>();
  const std::string text = SpecialTokenText(root, "eos_token").value_or("");
  if (text.empty()) return std::vector<int32_t>();
  SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(text));
  if (ids.size() != 1 || ids[0] < 0 || ids[0] >= vocab_size) {
    return InvalidArgumentError(path + ": eos_token " + storage::Quote(text) +
                                " is not one token of this model's tokenizer");
  }
  return ids;
}

}  // namespace sy
