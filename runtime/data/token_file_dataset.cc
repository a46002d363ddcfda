#include "runtime/data/token_file_dataset.h"

#include <algorithm>
#include <limits>

#include "runtime/core/check.h"

namespace sy {

std::string_view TokenDTypeName(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kU16:
      return "u16";
    case TokenDType::kU32:
      return "u32";
  }
  return "unknown";
}

Result<std::unique_ptr<TokenFileDataset>> TokenFileDataset::Open(const std::string& path,
                                                                 TokenDType dtype, int64_t seq_len,
                                                                 int64_t vocab_size,
                                                                 double eval_fraction) {
  SY_ASSIGN_OR_RETURN(MappedFile file, OpenDataFile(path));
  const size_t width = dtype == TokenDType::kU16 ? 2 : 4;
  if (file.size() % width != 0) {
    return InvalidArgumentError("data file " + path + ": size " + std::to_string(file.size()) +
                                " bytes is not a whole number of " +
                                std::string(TokenDTypeName(dtype)) +
                                " tokens; check data.token_dtype (u16 or u32)");
  }
  if (vocab_size < 0 || vocab_size > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("data file " + path +
                                ": 'data.vocab_size' must be in [0, 2147483647] (tokens are "
                                "int32), got " +
                                std::to_string(vocab_size));
  }
  std::unique_ptr<TokenFileDataset> dataset(new TokenFileDataset(std::move(file), dtype));
  const int64_t num_tokens = static_cast<int64_t>(dataset->file_.size() / width);
  SY_RETURN_IF_ERROR(dataset->InitWindows(path, num_tokens, seq_len, eval_fraction));

  uint32_t max_token = 0;
  for (int64_t i = 0; i < num_tokens; ++i) max_token = std::max(max_token, dataset->TokenAt(i));
  const uint64_t limit = vocab_size > 0
                             ? static_cast<uint64_t>(vocab_size)
                             : static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
  if (max_token >= limit) {
    int64_t first = 0;
    while (dataset->TokenAt(first) < limit) ++first;
    return InvalidArgumentError("data file " + path + ": token " + std::to_string(first) + " is " +
                                std::to_string(dataset->TokenAt(first)) +
                                ", outside the vocabulary [0, " + std::to_string(limit) + "); " +
                                (vocab_size > 0
                                     ? "raise data.vocab_size or check data.token_dtype"
                                     : "token ids must fit an int32; check data.token_dtype"));
  }
  dataset->vocab_size_ = vocab_size > 0 ? vocab_size : static_cast<int64_t>(max_token) + 1;
  dataset->eval_fraction_ = eval_fraction;
  return dataset;
}

std::string_view TokenFileDataset::task_name(int task) const {
  SY_CHECK_EQ(task, 0);
  return "tokens";
}

uint32_t TokenFileDataset::TokenAt(int64_t i) const {
  const uint8_t* p = file_.bytes().data();
  if (dtype_ == TokenDType::kU16) {
    return static_cast<uint32_t>(p[2 * i]) | static_cast<uint32_t>(p[2 * i + 1]) << 8;
  }
  return static_cast<uint32_t>(p[4 * i]) | static_cast<uint32_t>(p[4 * i + 1]) << 8 |
         static_cast<uint32_t>(p[4 * i + 2]) << 16 | static_cast<uint32_t>(p[4 * i + 3]) << 24;
}

void TokenFileDataset::ReadTokens(int64_t begin, std::span<int32_t> out) const {
  SY_CHECK(begin >= 0 && begin + static_cast<int64_t>(out.size()) <= num_stream_tokens());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<int32_t>(TokenAt(begin + static_cast<int64_t>(i)));
  }
}

nlohmann::json TokenFileDataset::Fingerprint() const {
  return {{"kind", "tokens"},
          {"bytes", file_.size()},
          {"sample_hash", DataFileSampleHash(file_.bytes())},
          {"token_dtype", TokenDTypeName(dtype_)},
          {"seq_len", seq_len()},
          {"vocab_size", vocab_size_},
          {"eval_fraction", eval_fraction_}};
}

}  // namespace sy
