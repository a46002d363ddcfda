// CheckpointReader: opens an HDF5 checkpoint (layout: storage/hdf5/checkpoint_layout.h), lists
// its tensors and metadata, and reads tensors into caller memory after checking their shape and
// dtype.
//
//   SY_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open("run/ckpt-000100.h5"));
//   SY_RETURN_IF_ERROR(reader->ReadTensor("params/embed", embed_host_tensor));
//   SY_ASSIGN_OR_RETURN(std::string position, reader->ReadText(kCheckpointDataPositionKey));
//
// Every error names the file and what is wrong, so a user can act on it:
//   NotFound         the file does not exist; a tensor or metadata key is missing (with the
//                    nearest existing name)
//   InvalidArgument  the file is not HDF5, or HDF5 but not a Switchyard checkpoint; a tensor's
//                    shape or dtype differs from the one requested:
//                    "checkpoint X: tensor 'params/embed' has shape [100, 64], the model expects
//                    [128, 64]"
//   DataLoss         an HDF5 file that cannot be read: truncated or corrupt; a tensor or
//                    metadata entry that claims more bytes than the whole file holds
//   Unimplemented    a checkpoint written by a newer format version
// HDF5's own error stack is never printed; its innermost message is part of the Status.
//
// Ownership: keeps the file open until destroyed; returned lists are copies.
// Thread-safety: const methods may be called from several threads (HDF5 calls are serialised
// process-wide by storage/hdf5/hdf5_library.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/shape.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy {

struct CheckpointTensorInfo {
  std::string name;  // "params/layers/0/attn/wq"
  DType dtype = DType::kF32;
  Shape shape;
};

class CheckpointReader {
 public:
  static Result<std::unique_ptr<CheckpointReader>> Open(const std::string& path);

  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const std::string& path() const { return path_; }
  int64_t step() const { return step_; }
  int64_t format_version() const { return format_version_; }
  int shard_index() const { return shard_index_; }
  int num_shards() const { return num_shards_; }

  // Every tensor, sorted by name.
  const std::vector<CheckpointTensorInfo>& tensors() const { return tensors_; }
  std::vector<std::string> TensorNames() const;
  // nullptr when absent.
  const CheckpointTensorInfo* FindTensor(std::string_view name) const;

  // Reads tensor `name` into `out`, which holds shape.numel() elements of `dtype`, after checking
  // that the stored tensor has exactly that dtype and shape.
  Status ReadTensor(std::string_view name, DType dtype, const Shape& shape, void* out) const;
  // The same into a host tensor (contiguous), taking the expected dtype and shape from it.
  Status ReadTensor(std::string_view name, const Tensor& out) const;

  // Metadata under meta/ (see checkpoint_layout.h for the standard keys), sorted.
  std::vector<std::string> MetadataKeys() const { return metadata_keys_; }
  bool HasMetadata(std::string_view key) const;
  // Text or bytes metadata, either way (text is returned as its bytes, bytes as a string).
  Result<std::string> ReadText(std::string_view key) const;
  Result<std::vector<uint8_t>> ReadBytes(std::string_view key) const;

 private:
  struct File;  // the HDF5 ids, kept out of this header
  CheckpointReader(std::string path, std::unique_ptr<File> file);

  Status LoadIndex();
  Status NotFoundTensor(std::string_view name) const;

  std::string path_;
  std::unique_ptr<File> file_;
  int64_t step_ = 0;
  int64_t format_version_ = 0;
  int shard_index_ = 0;
  int num_shards_ = 1;
  uint64_t file_bytes_ = 0;  // no dataset may claim more (the writer stores them uncompressed)
  std::vector<CheckpointTensorInfo> tensors_;
  std::vector<std::string> metadata_keys_;
};

}  // namespace sy
