// CheckpointSet: one checkpoint, whether a single HDF5 file or a sharded checkpoint (a directory
// of shard-I-of-N.h5 files, storage/hdf5/checkpoint_layout.h), read through one interface: the
// tensors of all shards, the metadata of the checkpoint.
//
//   SY_ASSIGN_OR_RETURN(auto set, CheckpointSet::Open("run/resharded-ep4"));  // or a .h5 file
//   SY_RETURN_IF_ERROR(set->ReadTensor("experts/layer0/expert3/w_up", DType::kF32, shape, data));
//
// Open checks that the shards form one checkpoint before anything is read: every shard
// 0 .. N-1 present once (no other shard-*.h5 name in the directory), each file's own shard_index
// and num_shards agreeing with its name, one step, the same metadata keys and the same meta/config,
// and no tensor in two shards. Errors (as CheckpointReader's, naming the file; plus
// FailedPrecondition for a set that does not form one checkpoint, naming the shard and the fix):
// a single file that is one shard of several is refused, naming the directory to open instead.
//
// Ownership: keeps every shard file open until destroyed; returned lists are copies or live as
// long as the set. Thread-safety: const methods may be called from several threads (as
// CheckpointReader's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "storage/hdf5/checkpoint_reader.h"

namespace sy {

class CheckpointSet {
 public:
  // `path`: a checkpoint file, or a directory holding a sharded checkpoint.
  static Result<std::unique_ptr<CheckpointSet>> Open(const std::string& path);
  // True when `path` is a directory holding at least one shard-*-of-*.h5 file (a cheap look at
  // names; Open does the checks).
  static bool IsShardedCheckpointDir(const std::string& path);

  ~CheckpointSet();
  CheckpointSet(const CheckpointSet&) = delete;
  CheckpointSet& operator=(const CheckpointSet&) = delete;

  const std::string& path() const { return path_; }  // as given to Open
  int64_t step() const;
  int num_shards() const { return static_cast<int>(shards_.size()); }
  // Every tensor of every shard, sorted by name.
  const std::vector<CheckpointTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const CheckpointTensorInfo* FindTensor(std::string_view name) const;
  // The file holding tensor `name` (for messages); the set's path when absent.
  const std::string& FileOf(std::string_view name) const;
  // CheckpointReader::ReadTensor on the shard holding `name` (NotFound naming the set when none).
  Status ReadTensor(std::string_view name, DType dtype, const Shape& shape, void* out) const;
  // The checkpoint's metadata (every shard holds the same keys; read from shard 0).
  std::vector<std::string> MetadataKeys() const;
  bool HasMetadata(std::string_view key) const;
  Result<std::string> ReadText(std::string_view key) const;
  Result<std::vector<uint8_t>> ReadBytes(std::string_view key) const;

 private:
  explicit CheckpointSet(std::string path) : path_(std::move(path)) {}
  Status Index();

  std::string path_;
  std::vector<std::unique_ptr<CheckpointReader>> shards_;  // by shard index
  std::vector<CheckpointTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> shard_of_;  // tensor name -> index into shards_
};

}  // namespace sy
