// ListTokenizer: a Tokenizer over a fixed list of token texts (id i decodes to tokens[i]), for the
// tests and benchmarks of what works on a vocabulary's bytes (inference/token_constraint.h). It
// does not encode. Ownership: a value. Thread-safety: const members from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inference/tokenizer.h"

namespace sy {

class ListTokenizer : public Tokenizer {
 public:
  explicit ListTokenizer(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}
  Result<std::vector<int32_t>> Encode(std::string_view) const override {
    return UnimplementedError("ListTokenizer does not encode");
  }
  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) out += tokens_[static_cast<size_t>(id)];
    return out;
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  std::vector<std::string> tokens_;
};

}  // namespace sy
