// TextDataset: raw UTF-8 (or any) text tokenised as bytes, cut into windows of seq_len + 1 tokens
// (runtime/data/windowed_dataset.h).
//
// Vocabulary: 0..255 are the bytes, kTextBos (256) starts the file and kTextEos (257) ends it, so
// the stream is BOS, byte_0, ..., byte_{n-1}, EOS and vocab_size() is 258. No other tokeniser is
// involved, which makes it the quickest way to train on a text file.
//
// Ownership: owns a read-only mapping of the file. Thread-safety: see runtime/data/dataset.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/core/mapped_file.h"
#include "runtime/data/windowed_dataset.h"

namespace sy {

inline constexpr int32_t kTextBos = 256;
inline constexpr int32_t kTextEos = 257;
inline constexpr int64_t kTextVocabSize = 258;

class TextDataset : public WindowedDataset {
 public:
  static Result<std::unique_ptr<TextDataset>> Open(const std::string& path, int64_t seq_len,
                                                   double eval_fraction);

  std::string name() const override { return "text " + file_.path(); }
  int64_t vocab_size() const override { return kTextVocabSize; }
  std::string_view task_name(int task) const override;
  nlohmann::json Fingerprint() const override;

 protected:
  void ReadTokens(int64_t begin, std::span<int32_t> out) const override;

 private:
  explicit TextDataset(MappedFile file) : file_(std::move(file)) {}

  MappedFile file_;
  double eval_fraction_ = 0;
};

}  // namespace sy
