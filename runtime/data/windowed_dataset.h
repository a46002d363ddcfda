// WindowedDataset: the shared part of the file datasets, which cut one long token stream into
// training examples.
//
// The stream of N tokens is cut into W = N / (seq_len + 1) non-overlapping windows of seq_len + 1
// tokens (a trailing partial window is dropped). Window w gives tokens = window[0, seq_len) and
// targets = window[1, seq_len] (every position scored). The last E windows are the eval split,
// E = floor(W * eval_fraction), at least 1 when eval_fraction > 0 and W >= 2; the rest are the
// train split. The splits share no token.
//
// Subclasses provide the stream through ReadTokens. Every example has task id 0.
// Thread-safety: see runtime/data/dataset.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/core/mapped_file.h"
#include "runtime/data/dataset.h"

namespace sy {

// Maps the data file of a file dataset: as MappedFile::Open, with every error naming it as the
// data file and pointing at data.path.
Result<MappedFile> OpenDataFile(const std::string& path);

// A hash of a data file's size and its first and last 64 KiB: cheap, and enough to tell a resumed
// run that its data file was replaced (it is part of the file datasets' fingerprints).
uint64_t DataFileSampleHash(std::span<const uint8_t> bytes);

class WindowedDataset : public Dataset {
 public:
  int64_t seq_len() const override { return seq_len_; }
  int num_tasks() const override { return 1; }
  int64_t size(Split split) const override;
  Result<int32_t> Get(Split split, int64_t index, std::span<int32_t> tokens,
                      std::span<int32_t> targets) const override;

  int64_t num_stream_tokens() const { return num_tokens_; }

 protected:
  WindowedDataset() = default;

  // Sets the layout. InvalidArgument naming `file` when the stream is shorter than one window, or
  // so short that eval_fraction leaves no train window.
  Status InitWindows(const std::string& file, int64_t num_tokens, int64_t seq_len,
                     double eval_fraction);

  // Writes stream tokens [begin, begin + out.size()) to out.
  virtual void ReadTokens(int64_t begin, std::span<int32_t> out) const = 0;

 private:
  int64_t num_tokens_ = 0;
  int64_t seq_len_ = 0;
  int64_t num_train_ = 0;
  int64_t num_eval_ = 0;
};

}  // namespace sy
