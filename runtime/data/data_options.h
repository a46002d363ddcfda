// DataOptions: the "data" block of the config, its schema, and the factory that opens the dataset
// it describes.
//
//   "data": {
//     "source": "synthetic",          // synthetic | tokens | text
//     "seq_len": 64, "batch_size": 8, "seed": 1234, "eval_fraction": 0.1,
//     "path": "corpus.bin",           // tokens and text
//     "token_dtype": "u16",           // tokens: u16 | u32
//     "vocab_size": 0,                // tokens: 0 = largest token + 1
//     "synthetic": {"num_symbols": 16, "min_len": 2, "max_len": 8, "modulus": 97, ...},
//     "tasks": {"copy": {"weight": 1}, "reverse": {"weight": 1}, "sort": {"weight": 1},
//               "modadd": {"weight": 1}, "markov": {"weight": 1}}
//   }
//
// Ownership: value types. Thread-safety: DataOptionsSchema() is safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/config/config_schema.h"
#include "runtime/data/batcher.h"
#include "runtime/data/dataset.h"
#include "runtime/data/synthetic_dataset.h"
#include "runtime/data/token_file_dataset.h"

namespace sy {

enum class DataSource : uint8_t { kSynthetic, kTokens, kText };

struct DataOptions {
  DataSource source = DataSource::kSynthetic;  // Default: synthetic
  int64_t seq_len = 64;                        // Default: 64 tokens per example
  int64_t batch_size = 8;                      // Default: 8 examples per batch (per rank)
  uint64_t seed = 1234;                        // Default: 1234. Examples, hold-out, shuffling
  double eval_fraction = 0.1;                  // Default: 0.1 held out for eval, in [0, 0.9]
  std::string path;                            // Default: none. tokens/text file
  TokenDType token_dtype = TokenDType::kU16;   // Default: u16. tokens only
  int64_t vocab_size = 0;                      // Default: 0 = largest token + 1. tokens only
  bool shuffle = true;                         // Default: true. Shuffle file windows per epoch
  SyntheticOptions synthetic;                  // synthetic only
  SyntheticTaskWeights tasks;                  // synthetic only
};

// The schema of the "data" block, with the cross-field checks (an example must fit seq_len, a
// file source needs a path).
const ConfigSchema<DataOptions>& DataOptionsSchema();

// Opens the dataset `options` describes. Errors name the file or the data.* key.
Result<std::unique_ptr<Dataset>> CreateDataset(const DataOptions& options);

// Batcher options for `split` of this data config (eval is never shuffled).
BatcherOptions MakeBatcherOptions(const DataOptions& options, Split split, int num_shards = 1,
                                  int shard = 0);

}  // namespace sy
