// Tokenizer round trip: texts encoded with a tokenizer and decoded back, as
// `switchyard tokenize --texts FILE` prints them for tests/inference/hf_tokenizer_oracle.py to
// compare with the Hugging Face tokenizers library.
//
// Ownership: values; the tokenizer is borrowed for the call. Thread-safety: as Tokenizer::Encode
// and Decode (const, safe from several threads).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "inference/tokenizer.h"
#include "runtime/core/status.h"

namespace sy {

struct TokenizedText {
  std::vector<int32_t> ids;  // Encode(text)
  std::string decoded;       // Decode(ids)
};

// The strings of the JSON array in the file at `path` (at most 64 MiB). NotFound for a missing
// file; InvalidArgument naming the file when it is not a JSON array of strings.
Result<std::vector<std::string>> ReadTextList(const std::string& path);

// Each of `texts` encoded, and its ids decoded back. The tokenizer's error for the first text it
// cannot encode or decode.
Result<std::vector<TokenizedText>> RoundTripTexts(const Tokenizer& tokenizer,
                                                  std::span<const std::string> texts);

}  // namespace sy
