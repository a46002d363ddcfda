#include "runtime/data/windowed_dataset.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/data/sample_rng.h"

namespace sy {

Result<MappedFile> OpenDataFile(const std::string& path) {
  Result<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) {
    return Status(file.status().code(),
                  "data file " + file.status().message() + "; check data.path");
  }
  return file;
}

uint64_t DataFileSampleHash(std::span<const uint8_t> bytes) {
  constexpr size_t kEdge = 64 << 10;
  uint64_t h = MixSeed(0x66696c65ull, bytes.size());
  auto absorb = [&h](std::span<const uint8_t> part) {
    for (size_t i = 0; i < part.size(); i += 8) {
      uint64_t word = 0;
      for (size_t j = 0; j < 8 && i + j < part.size(); ++j) {
        word |= static_cast<uint64_t>(part[i + j]) << (8 * j);
      }
      h = MixSeed(h, word);
    }
  };
  absorb(bytes.first(std::min(kEdge, bytes.size())));
  if (bytes.size() > kEdge) absorb(bytes.last(std::min(kEdge, bytes.size() - kEdge)));
  return h;
}

Status WindowedDataset::InitWindows(const std::string& file, int64_t num_tokens, int64_t seq_len,
                                    double eval_fraction) {
  if (seq_len < 1) {
    return InvalidArgumentError("data file " + file + ": 'data.seq_len' must be at least 1, got " +
                                std::to_string(seq_len));
  }
  if (!(eval_fraction >= 0.0 && eval_fraction <= 0.9)) {
    return InvalidArgumentError("data file " + file +
                                ": 'data.eval_fraction' must be in [0, 0.9], got " +
                                std::to_string(eval_fraction));
  }
  const int64_t window = seq_len + 1;
  const int64_t num_windows = num_tokens / window;
  if (num_windows < 1) {
    return InvalidArgumentError(
        "data file " + file + ": holds " + std::to_string(num_tokens) +
        " tokens, fewer than one window of data.seq_len + 1 = " + std::to_string(window) +
        " tokens; use a longer file or a smaller data.seq_len");
  }
  int64_t num_eval =
      static_cast<int64_t>(std::floor(static_cast<double>(num_windows) * eval_fraction));
  if (eval_fraction > 0.0 && num_eval == 0 && num_windows >= 2) num_eval = 1;
  if (num_eval >= num_windows) num_eval = num_windows - 1;
  num_tokens_ = num_tokens;
  seq_len_ = seq_len;
  num_train_ = num_windows - num_eval;
  num_eval_ = num_eval;
  return Status::Ok();
}

int64_t WindowedDataset::size(Split split) const {
  switch (split) {
    case Split::kTrain:
      return num_train_;
    case Split::kEval:
      return num_eval_;
  }
  return 0;
}

Result<int32_t> WindowedDataset::Get(Split split, int64_t index, std::span<int32_t> tokens,
                                     std::span<int32_t> targets) const {
  SY_CHECK_EQ(static_cast<int64_t>(tokens.size()), seq_len_);
  SY_CHECK_EQ(static_cast<int64_t>(targets.size()), seq_len_);
  const int64_t n = size(split);
  if (n == 0) {
    return FailedPreconditionError(name() + ": the " + std::string(SplitName(split)) +
                                   " split is empty (data.eval_fraction, or a file of only one "
                                   "window of data.seq_len + 1 tokens)");
  }
  SY_CHECK(index >= 0 && index < n) << SplitName(split) << " index " << index << " of " << n;
  const int64_t window = split == Split::kTrain ? index : num_train_ + index;
  const int64_t begin = window * (seq_len_ + 1);
  ReadTokens(begin, tokens);
  ReadTokens(begin + 1, targets);
  return 0;
}

}  // namespace sy
