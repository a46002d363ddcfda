// TokenFileDataset: a pre-tokenised corpus, one flat file of little-endian token ids (uint16 or
// uint32, chosen by data.token_dtype), cut into windows of seq_len + 1 tokens
// (runtime/data/windowed_dataset.h).
//
// Opening checks that the file size is a whole number of tokens and that every token is below the
// vocabulary size (and fits an i32), naming the file and the offending token on failure.
//
// Ownership: owns a read-only mapping of the file. Thread-safety: see runtime/data/dataset.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/core/mapped_file.h"
#include "runtime/data/windowed_dataset.h"

namespace sy {

enum class TokenDType : uint8_t { kU16, kU32 };
std::string_view TokenDTypeName(TokenDType dtype);  // "u16", "u32"

class TokenFileDataset : public WindowedDataset {
 public:
  // vocab_size 0 means the largest token in the file + 1.
  static Result<std::unique_ptr<TokenFileDataset>> Open(const std::string& path, TokenDType dtype,
                                                        int64_t seq_len, int64_t vocab_size,
                                                        double eval_fraction);

  std::string name() const override { return "tokens " + file_.path(); }
  int64_t vocab_size() const override { return vocab_size_; }
  std::string_view task_name(int task) const override;
  nlohmann::json Fingerprint() const override;

 protected:
  void ReadTokens(int64_t begin, std::span<int32_t> out) const override;

 private:
  TokenFileDataset(MappedFile file, TokenDType dtype) : file_(std::move(file)), dtype_(dtype) {}

  uint32_t TokenAt(int64_t i) const;

  MappedFile file_;
  TokenDType dtype_;
  int64_t vocab_size_ = 0;
  double eval_fraction_ = 0;
};

}  // namespace sy
