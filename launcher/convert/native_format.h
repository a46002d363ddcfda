// The native format: Switchyard's HDF5 training checkpoint (launcher/training/train_checkpoint.h),
// consolidated in one step-*.h5 file, as a ModelFormat (launcher/convert/model_image.h).
//
// Read: a step-*.h5 file, or a checkpoint directory (its newest checkpoint). The architecture is
// the run's meta/config; every parameter the config implies must be present in f32 with its shape,
// optimizer moments (optim/m, optim/v) and optim/steps are read when present, and any other
// tensor is an error naming it. Each tensor's crc32c in meta/tensor_crc32c is checked when the
// tensor is read.
//
// Write: one .h5 file at `out`, through CheckpointWriter (temporary name, fsync, rename), in the
// layout WriteTrainCheckpoint writes, so `switchyard generate` and `train --resume-from` read
// it. Parameters and moments are f32 (the trainer's masters; --dtype other than f32 is refused,
// and bf16/f16 sources widen exactly). optim/steps is copied, or zeros when the source has none.
// The meta/config is the source's run config, or, from another format, a config whose "model"
// block is the architecture and every other block its default. Hugging Face side files ride
// along as metadata "hf:<file name>" (bytes), so hf -> native -> hf gives them back.
//
// Thread-safety: stateless; see ModelFormat.
#pragma once

#include "launcher/convert/model_image.h"

namespace sy::convert {

const ModelFormat& NativeFormat();

// Metadata key prefix of the Hugging Face side files in a native checkpoint.
inline constexpr std::string_view kHfFileMetaPrefix = "hf:";
// Metadata key of ModelImage::hf_dtype ("f32", "bf16", "f16").
inline constexpr std::string_view kHfDTypeMetaKey = "hf_dtype";

}  // namespace sy::convert
