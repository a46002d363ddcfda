// The layout of a Switchyard HDF5 checkpoint, and the tensor naming conventions.
//
//   /                        attributes: format = "switchyard-checkpoint", format_version = 1,
//                                        step (int64), shard_index, num_shards (int32)
//   /meta/<key>              metadata: text (a fixed-length UTF-8 string dataset with a "length"
//                            attribute) or bytes (a 1-D uint8 dataset). Standard keys below.
//   /<tensor name>           one dataset per tensor, with its shape, and a "dtype" attribute
//                            ("f32", "bf16", "f16", "i32", "i64", "u8", "i8"). f32 is stored as
//                            IEEE float32; bf16 and f16 as uint16 bit patterns.
// A tensor name is a path of '/'-separated parts; each part but the last becomes an HDF5 group:
//   params/layers/0/attn/wq                  a dense parameter
//   experts/layer3/expert17/w_gate           an expert, under its GLOBAL expert id, so a
//                                            checkpoint reshards across expert-parallel sizes by
//                                            relabelling
//   optim/m/params/layers/0/attn/wq          optimizer state of a parameter (master, m, v)
//
// A sharded checkpoint (`switchyard convert --ep-size N`, N > 1) is a directory of N files
// named CheckpointShardFileName(i, N) = "shard-0000i-of-0000N.h5", shard i holding the tensors of
// expert-parallel rank i: shard 0 every dense tensor (with its optimizer state, optim/steps),
// shard i the experts rank i owns (parallel/expert_parallel_compute.h ExpertOwner), each with its
// m and v. Every shard carries the whole meta/ group and the same step, so each file describes
// the checkpoint; the tensor -> shard index is the union of the shards' own tensor lists (no
// separate index file that could disagree with them). CheckpointSet (checkpoint_set.h) reads a
// sharded checkpoint and a single file alike.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

inline constexpr std::string_view kCheckpointFormat = "switchyard-checkpoint";
inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr std::string_view kCheckpointMetaGroup = "meta";

// Standard metadata keys.
inline constexpr std::string_view kCheckpointConfigKey = "config";               // effective JSON
inline constexpr std::string_view kCheckpointRngStateKey = "rng_state";          // bytes
inline constexpr std::string_view kCheckpointDataPositionKey = "data_position";  // Batcher JSON

// "experts/layer{layer}/expert{global_expert}/{weight}", weight one of w_gate, w_up, w_down.
std::string ExpertTensorName(int layer, int global_expert, std::string_view weight);
// "optim/{state}/{name}", state one of master, m, v.
std::string OptimizerStateName(std::string_view state, std::string_view name);
// The global expert id of an expert tensor or of its optimizer state
// ("experts/layer3/expert17/w_up", "optim/m/experts/layer3/expert17/w_up" -> 17); -1 for any
// other name.
int ExpertOfTensorName(std::string_view name);

// "shard-{index:05}-of-{count:05}.h5" (more digits past 99999).
std::string CheckpointShardFileName(int index, int count);
// True when `filename` (no directory) is a name CheckpointShardFileName makes; sets index and
// count. Bounds-checked: digits only, values that fit an int, index < count.
bool ParseCheckpointShardFileName(std::string_view filename, int* index, int* count);

// InvalidArgument unless `name` is a valid tensor name: non-empty parts separated by single '/',
// no leading or trailing '/', no "." or ".." part, no control characters, and not under "meta/".
Status ValidateTensorName(std::string_view name);
// The same rules for a metadata key, which is a single part.
Status ValidateMetadataKey(std::string_view key);

}  // namespace sy
