// Tokenizer: text <-> token ids for `switchyard generate --prompt`.
//
// Two implementations, both loaded from a model directory (or a GGUF's metadata) by LoadTokenizer:
//   - Hugging Face tokenizer.json with a byte-level BPE model (GPT-2, Qwen2/3, OLMoE, Llama 3):
//     added/special tokens are matched first (leftmost, longest), the text between them is
//     normalized (none or NFC), split by the pre-tokenizer (ByteLevel's GPT-2 regex, or a Split
//     with the Qwen2 / Llama 3 regex followed by ByteLevel), mapped byte -> unicode with GPT-2's
//     table and merged by rank. Decoding maps back to bytes; added tokens decode to their text.
//     Anything else (WordPiece, Unigram, other normalizers or regexes, lstrip/rstrip added
//     tokens) is refused with Unimplemented naming the field. The file is untrusted: every
//     field's type, every id and every merge is checked (InvalidArgument naming the field).
//   - SentencePiece tokenizer.model through libsentencepiece (Mixtral, Llama 2); Unavailable
//     when the build found no libsentencepiece.
// Neither adds BOS/EOS: a prompt is encoded as its text.
//
// Ownership: LoadTokenizer returns an owning pointer; the tokenizer keeps no reference to its
// input. Thread-safety: Encode and Decode are const and safe from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace sy {

// A tokenizer's vocabulary as llama.cpp's llama_vocab sees it (the GGUF keys tokenizer.ggml.*,
// written by inference/gguf_tokenizer.h).
struct TokenizerVocabulary {
  // tokenizer.ggml.model: "llama" (SentencePiece) or "gpt2" (byte-level BPE).
  std::string model;
  // tokenizer.ggml.pre, llama.cpp's pre-tokenizer name: "default" for SentencePiece; "gpt-2",
  // "qwen2" or "llama-bpe" by the BPE's split regex.
  std::string pre;
  // Indexed by id. An id with no token has an empty string and type kUnused.
  std::vector<std::string> tokens;
  std::vector<float> scores;  // SentencePiece: the piece scores; BPE: empty
  // llama_token_type values.
  enum Type : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
  };
  std::vector<int32_t> types;
  std::vector<std::string> merges;  // BPE: "left right", by rank; SentencePiece: empty
  // Whether a space is put before the text (SentencePiece's add_dummy_prefix; BPE ByteLevel's
  // add_prefix_space).
  bool add_space_prefix = false;
  // The model's own special ids (SentencePiece), -1 when it has none.
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // InvalidArgument when `text` is not valid UTF-8.
  virtual Result<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // The bytes of `ids`; InvalidArgument naming an id outside the vocabulary. A prefix of a
  // sequence may end inside a UTF-8 character (byte-level tokens split characters).
  virtual Result<std::string> Decode(std::span<const int32_t> ids) const = 0;
  // One more than the largest id.
  virtual int64_t vocab_size() const = 0;
  // The vocabulary; Unimplemented for a tokenizer llama.cpp has no model for.
  virtual Result<TokenizerVocabulary> Vocabulary() const {
    return UnimplementedError("this tokenizer has no llama.cpp vocabulary form");
  }
};

// dir/tokenizer.json when present, else dir/tokenizer.model; NotFound naming both otherwise. A
// GGUF file (`dir` ending in .gguf) instead: the tokenizer of its tokenizer.ggml.* metadata
// (LoadGgufTokenizer, inference/gguf_tokenizer.h).
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);

// A tokenizer.json's text; `source` names it in errors.
Result<std::unique_ptr<Tokenizer>> ParseHfTokenizerJson(std::string_view json,
                                                        const std::string& source);

// The inverse of a byte-level BPE's Vocabulary(): a tokenizer.json (model "gpt2") that
// ParseHfTokenizerJson and the Hugging Face tokenizers library read as a tokenizer with these
// tokens and merges. Tokens of type normal, unknown and byte go into model.vocab; control and
// user-defined ones into model.vocab and added_tokens (special true / false); unused ids are left
// out. The pre-tokenizer is the one llama.cpp names `pre`: "gpt-2" and "olmo" (GPT-2's regex),
// "qwen2", "llama-bpe" (Llama 3's regex, merges ignored for whole-word tokens as llama.cpp does);
// Unimplemented naming `source` and the name for any other. No normalizer (a GGUF records none;
// llama.cpp applies none). `vocab` must be valid (tokens valid UTF-8 and unique, merges two tokens
// whose concatenation is a token): InvalidArgument naming `source` otherwise.
Result<std::string> HfTokenizerJson(const TokenizerVocabulary& vocab, const std::string& source);

// Whether `bytes` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// A SentencePiece model file.
Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);
// A SentencePiece model from its bytes (a tokenizer.model's contents); `source` names it in errors.
Result<std::unique_ptr<Tokenizer>> ParseSentencePieceModel(std::string_view bytes,
                                                           const std::string& source);

// Streams decoded text: Append(id) returns the new complete UTF-8 text, holding back the bytes of
// a character that is not complete yet; a byte sequence that can never be UTF-8 is shown as
// U+FFFD (so what it returns is always valid UTF-8). Not thread-safe; borrows `tokenizer`.
class TextStreamer {
 public:
  explicit TextStreamer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  Result<std::string> Append(int32_t id);
  // Whatever is still held back (an incomplete character at the end).
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;  // bytes of Decode(ids_) already returned
};

}  // namespace sy
