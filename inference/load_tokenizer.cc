// LoadTokenizer (inference/tokenizer.h): a model's tokenizer from its directory or GGUF file. Kept
// apart from the tokenizers themselves, which the tokenizer fuzzer compiles without the GGUF
// reader.
#include <filesystem>

#include "inference/gguf_model.h"
#include "inference/gguf_tokenizer.h"
#include "inference/tokenizer.h"
#include "runtime/core/read_file.h"

namespace sy {
namespace {

// A tokenizer.json of a large vocabulary (Qwen: ~7 MB, Llama 3: ~9 MB) with room to spare.
constexpr size_t kMaxTokenizerJsonBytes = size_t{256} << 20;

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir) {
  if (IsGgufPath(dir)) return LoadGgufTokenizer(dir);
  const std::string json_path = (std::filesystem::path(dir) / "tokenizer.json").string();
  const std::string spm_path = (std::filesystem::path(dir) / "tokenizer.model").string();
  std::error_code ec;
  if (std::filesystem::exists(json_path, ec)) {
    SY_ASSIGN_OR_RETURN(std::string text,
                        ReadFile(json_path, kMaxTokenizerJsonBytes, "a tokenizer.json"));
    return ParseHfTokenizerJson(text, json_path);
  }
  if (std::filesystem::exists(spm_path, ec)) return LoadSentencePieceTokenizer(spm_path);
  return NotFoundError(dir +
                       " has neither tokenizer.json nor tokenizer.model; give token ids "
                       "instead of text (--prompt-ids, --ids)");
}

}  // namespace sy
