// CheckpointWriter: writes one HDF5 checkpoint file (layout: storage/hdf5/checkpoint_layout.h)
// atomically.
//
//   SY_ASSIGN_OR_RETURN(auto writer, CheckpointWriter::Create("run/ckpt-000100.h5"));
//   SY_RETURN_IF_ERROR(writer->AddTensor("params/embed", embed_host_tensor));
//   SY_RETURN_IF_ERROR(writer->AddTensor(ExpertTensorName(0, 17, "w_up"), w_up));
//   writer->SetStep(100);
//   SY_RETURN_IF_ERROR(writer->SetText(kCheckpointConfigKey, config.DumpEffective()));
//   SY_RETURN_IF_ERROR(writer->SetBytes(kCheckpointRngStateKey, rng_bytes));
//   SY_RETURN_IF_ERROR(writer->SetText(kCheckpointDataPositionKey, batcher.SavePosition()));
//   SY_RETURN_IF_ERROR(writer->Commit());
//
// Atomicity. Everything is written to a new temporary beside `path` (TemporaryPathFor, created
// with O_EXCL|O_NOFOLLOW: runtime/core/file_creation.h); Commit flushes and closes it, fsyncs
// it, renames it over `path` and fsyncs the directory. Until Commit returns OK the file at `path`
// (the previous checkpoint, if any) is untouched, so a crash or SIGKILL mid-save never destroys
// it; at worst a stale temporary is left behind (SIGINT and SIGTERM remove it:
// runtime/core/temporary_cleanup.h). The one failure after the rename, the
// directory's fsync, leaves the new file complete at `path` and says so (a power cut may still
// undo the rename); every earlier failure says the previous file is untouched. A writer destroyed
// without Commit deletes its temporary file.
//
// Tensors are written to the file as they are added (memory use stays at one tensor), from host
// memory, in any floating-point or integer DType; shapes of any rank, including 0-d and empty,
// are kept exactly.
//
// Deterministic bytes: no object creation or modification times are stored (HDF5's object time
// tracking is off for every group and dataset), so the same calls in the same order give the same
// file byte for byte with the same HDF5 library (tests/golden holds such a file and compares).
//
// Errors are Status values naming the file: IOError for the file system, InvalidArgument for a
// bad name or a non-host tensor, AlreadyExists for a name added twice (or one that collides with
// another tensor's path). After a failed Commit the writer is finished; create a new one.
//
// Ownership: owns the open temporary file. Thread-safety: one thread per writer; HDF5 calls are
// serialised process-wide (storage/hdf5/hdf5_library.h), so separate writers may run on separate
// threads but do not write in parallel.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "runtime/core/dtype.h"
#include "runtime/core/shape.h"
#include "runtime/core/status.h"
#include "runtime/core/temporary_cleanup.h"
#include "runtime/core/tensor.h"

namespace sy {

struct CheckpointWriterOptions {
  // This file's shard of a sharded save. Default: 0 of 1 (an unsharded checkpoint).
  int shard_index = 0;
  int num_shards = 1;
  // Default: true (a training run's checkpoint replaces one of the same step). false: Commit
  // never replaces anything at `path`, even what appeared there during the save (AlreadyExists
  // "<path> exists"; `convert`, which never overwrites).
  bool replace_existing = true;
};

class CheckpointWriter {
 public:
  // Creates the temporary file next to `path`. An errno Status naming the file when it cannot be
  // created (NotFound for a missing directory, IOError for permissions, ...).
  static Result<std::unique_ptr<CheckpointWriter>> Create(
      const std::string& path, const CheckpointWriterOptions& options = {});

  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes a host tensor (contiguous) under `name`.
  Status AddTensor(std::string_view name, const Tensor& tensor);
  // Writes shape.numel() elements of `dtype` from `data` under `name`.
  Status AddTensor(std::string_view name, DType dtype, const Shape& shape, const void* data);

  // The training step. Default: 0.
  void SetStep(int64_t step) { step_ = step; }
  // Metadata under meta/<key>; setting a key twice is AlreadyExists.
  Status SetText(std::string_view key, std::string_view text);
  Status SetBytes(std::string_view key, std::span<const uint8_t> bytes);

  // Makes the checkpoint durable at path() (see the top of this file).
  Status Commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  struct File;  // the HDF5 ids, kept out of this header
  CheckpointWriter(std::string path, ScopedTemporary temp, std::unique_ptr<File> file,
                   const CheckpointWriterOptions& options);

  Status CheckOpen() const;
  // Abandons the save: closes and deletes the temporary file.
  void Discard();

  std::string path_;
  std::string temp_path_;
  ScopedTemporary temp_;        // removes temp_path_ unless committed
  std::unique_ptr<File> file_;  // null once committed or discarded
  CheckpointWriterOptions options_;
  int64_t step_ = 0;
};

}  // namespace sy
