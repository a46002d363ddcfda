// Tokenizer: text <-> token ids for `switchyard generate --prompt`.
//
// Two implementations, both loaded from a model directory by LoadTokenizer:
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
};

// dir/tokenizer.json when present, else dir/tokenizer.model; NotFound naming both otherwise.
Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);

// A tokenizer.json's text; `source` names it in errors.
Result<std::unique_ptr<Tokenizer>> ParseHfTokenizerJson(std::string_view json,
                                                        const std::string& source);

// A SentencePiece model file.
Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);

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
