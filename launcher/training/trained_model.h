// LoadTrainedModel: a Switchyard training checkpoint (launcher/training/train_checkpoint.h, written
// by `switchyard train`) -> a forward-only MoeModel on a backend, for `switchyard generate`.
//
// The model config comes from the checkpoint's own meta/config (the run's effective config),
// bound by the trainer's schema (launcher/training/train_options.h LoadTrainConfig), so inference
// and training read the same fields. A "model.vocab_size" of 0 (= the data's) is resolved from the
// stored embed_tokens shape. Parameters are read by the model's names with ReadTrainCheckpoint,
// which checks each one's shape and its crc32c in meta/tensor_crc32c; the optimizer moments are
// not read.
//
// Ownership: TrainedModel owns its model, which lives on the backend passed in (the backend must
// outlive it). The checkpoint file is closed before LoadTrainedModel returns.
// Thread-safety: LoadTrainedModel drives the backend's compute stream; call it from that thread.
// The path functions are reentrant.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "launcher/training/train_options.h"
#include "runtime/backend/backend.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy::launcher {

struct TrainedModel {
  std::string path;    // the .h5 file that was read
  int64_t step = 0;    // optimizer steps the checkpoint had taken
  TrainConfig config;  // the run's config, model.vocab_size resolved
  std::unique_ptr<MoeModel> model;
};

// True when `path` names a training checkpoint rather than a Hugging Face directory: a file
// ending in .h5, or a directory holding a step-*.h5 file or the shards of a sharded checkpoint
// (shard-*-of-*.h5, storage/hdf5/checkpoint_set.h) and no config.json.
bool IsTrainCheckpointPath(const std::string& path);

// `path` itself when it is a file or a sharded checkpoint's directory; else the checkpoint with
// the highest step in the directory (NotFound naming it when there is none).
Result<std::string> ResolveTrainCheckpoint(const std::string& path);

// Loads the checkpoint at `path` (a file or a checkpoint directory) with weights stored as
// `weight_dtype` (f32, bf16 or f16). Errors name the file: NotFound, DataLoss (corrupt, a
// checksum that fails), InvalidArgument (a config the schema rejects), FailedPrecondition (a
// parameter missing or with another shape than the config implies).
// `progress(values read, values to read)`, when given, runs as the weights are read.
Result<TrainedModel> LoadTrainedModel(Backend& backend, const std::string& path,
                                      DType weight_dtype = DType::kF32,
                                      const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sy::launcher
