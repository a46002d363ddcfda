// Batcher: turns a Dataset split into a stream of host batches, and saves and restores its place
// in that stream so a resumed run sees exactly the batches it would have seen.
//
// Order. A finite split is read in epochs; with shuffle on, epoch e visits the examples in a
// permutation drawn from (seed, e), else in index order. An unbounded split (synthetic data) is
// read in index order; its examples are already random. Batches run across epoch boundaries.
//
// Data parallel. With num_shards = N, one global batch is N * batch_size consecutive examples of
// that order, and shard r takes rows [r * batch_size, (r + 1) * batch_size). Every shard's
// position is the same, so any rank's saved position resumes all of them, under any N.
//
// Position. SavePosition() is a small JSON text: split, seed, shuffle, epoch, cursor (examples of
// the epoch consumed), the dataset's fingerprint and its mutable state (the synthetic task
// weights). RestorePosition() checks it against this batcher and dataset and continues from it;
// the next batches are then bit-identical to those the saving run would have produced.
//
// Ownership: the batcher does not own the dataset, which must outlive it; RestorePosition may
// change the dataset's state. Thread-safety: none; one thread drives a batcher. Batches are plain
// host tensors, owned by the Batch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/tensor.h"
#include "runtime/data/dataset.h"

namespace sy {

struct BatcherOptions {
  int64_t batch_size = 8;       // Default: 8 rows per shard
  Split split = Split::kTrain;  // Default: train
  bool shuffle = true;          // Default: true. Finite splits only
  uint64_t seed = 0;            // Default: 0. Seeds the epoch permutations
  int num_shards = 1;           // Default: 1. Data-parallel ranks sharing one stream
  int shard = 0;                // Default: 0. This rank, in [0, num_shards)
};

// One batch in host memory.
struct Batch {
  Tensor tokens;    // i32 [B, T]
  Tensor targets;   // i32 [B, T]; -1 where not scored
  Tensor task_ids;  // i32 [B]

  int64_t batch_size() const { return tokens.defined() ? tokens.dim(0) : 0; }
  int64_t seq_len() const { return tokens.defined() ? tokens.dim(1) : 0; }

  // Gives the three tensors the shapes of `rows` x `seq_len` rows, reallocating only when they
  // differ. The size comes from the config: ResourceExhausted when it does not fit, not a crash.
  Status Reshape(int64_t rows, int64_t seq_len);
};

class Batcher {
 public:
  // InvalidArgument for a non-positive batch size, bad shard numbers, or an empty split.
  static Result<Batcher> Create(Dataset* dataset, const BatcherOptions& options);

  // Fills *batch with the next batch, allocating its tensors when their shapes differ;
  // ResourceExhausted when they do not fit in memory.
  Status Next(Batch* batch);

  // Goes back to the first batch (epoch 0), e.g. before each pass over an eval split.
  void Rewind();

  int64_t epoch() const { return epoch_; }
  // Examples of the current epoch consumed so far, counted over all shards (for an unbounded
  // split: all examples so far).
  int64_t cursor() const { return cursor_; }
  const BatcherOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  std::string SavePosition() const;
  // InvalidArgument naming what differs when `saved` was written for another split, seed,
  // shuffle setting or dataset (a different file, seq_len, ...), or is not a data position.
  Status RestorePosition(std::string_view saved);

 private:
  Batcher(Dataset* dataset, const BatcherOptions& options) : dataset_(dataset), options_(options) {}

  // The dataset index of the next example in the stream, advancing the position.
  int64_t NextIndex();
  void BuildPermutation();

  Dataset* dataset_;
  BatcherOptions options_;
  int64_t size_ = 0;  // examples in the split, or Dataset::kUnbounded
  int64_t epoch_ = 0;
  int64_t cursor_ = 0;
  int64_t permutation_epoch_ = -1;
  std::vector<int64_t> permutation_;  // of the current epoch, when shuffling a finite split
};

}  // namespace sy
