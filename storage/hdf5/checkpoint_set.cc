#include "storage/hdf5/checkpoint_set.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "storage/hdf5/checkpoint_layout.h"

namespace sy {
namespace fs = std::filesystem;

bool CheckpointSet::IsShardedCheckpointDir(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    int index = 0, count = 0;
    if (ParseCheckpointShardFileName(entry.path().filename().string(), &index, &count)) {
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<CheckpointSet>> CheckpointSet::Open(const std::string& path) {
  std::unique_ptr<CheckpointSet> set(new CheckpointSet(path));
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(path));
    if (reader->num_shards() != 1) {
      return FailedPreconditionError(
          "checkpoint " + path + " is shard " + std::to_string(reader->shard_index()) + " of " +
          std::to_string(reader->num_shards()) + " of a sharded checkpoint; open its directory " +
          fs::path(path).parent_path().string() + " instead");
    }
    set->shards_.push_back(std::move(reader));
    SY_RETURN_IF_ERROR(set->Index());
    return set;
  }
  const std::string where = "sharded checkpoint " + path + ": ";
  // Shard files by index; the count is the one every name states.
  std::map<int, std::string> files;
  int count = 0;
  fs::directory_iterator it(path, ec);
  if (ec) return IOError("cannot list " + path + ": " + ec.message());
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    int index = 0, n = 0;
    if (!ParseCheckpointShardFileName(name, &index, &n)) continue;
    if (count != 0 && n != count) {
      return FailedPreconditionError(where + "holds shards of " + std::to_string(count) +
                                     " and of " + std::to_string(n) + " files (" + name +
                                     "); it mixes two checkpoints: keep one set of shards");
    }
    count = n;
    files[index] = entry.path().string();
  }
  if (files.empty()) {
    return NotFoundError(where +
                         "holds no shard-*-of-*.h5 file; pass a checkpoint file or the "
                         "directory `switchyard convert --ep-size N` wrote");
  }
  for (int i = 0; i < count; ++i) {
    if (!files.count(i)) {
      return FailedPreconditionError(where + "shard " + CheckpointShardFileName(i, count) +
                                     " is missing; the checkpoint is incomplete (convert it "
                                     "again from its source)");
    }
  }
  for (const auto& [index, file] : files) {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(file));
    if (reader->shard_index() != index || reader->num_shards() != count) {
      return FailedPreconditionError("checkpoint " + file + " says it is shard " +
                                     std::to_string(reader->shard_index()) + " of " +
                                     std::to_string(reader->num_shards()) +
                                     ", its name says otherwise; it was renamed: restore its "
                                     "name or convert again");
    }
    set->shards_.push_back(std::move(reader));
  }
  SY_RETURN_IF_ERROR(set->Index());
  return set;
}

CheckpointSet::~CheckpointSet() = default;

Status CheckpointSet::Index() {
  const CheckpointReader& first = *shards_.front();
  const std::vector<std::string> keys = first.MetadataKeys();
  std::string config;
  const bool has_config = first.HasMetadata(kCheckpointConfigKey);
  if (has_config) {
    SY_ASSIGN_OR_RETURN(config, first.ReadText(kCheckpointConfigKey));
  }
  for (size_t s = 0; s < shards_.size(); ++s) {
    const CheckpointReader& shard = *shards_[s];
    if (s > 0) {
      const std::string mismatch = "checkpoint " + shard.path() + " and " + first.path() +
                                   " belong to different checkpoints (";
      if (shard.step() != first.step()) {
        return FailedPreconditionError(mismatch + "step " + std::to_string(shard.step()) + " and " +
                                       std::to_string(first.step()) +
                                       "); keep the shards of one conversion together");
      }
      if (shard.MetadataKeys() != keys) {
        return FailedPreconditionError(mismatch +
                                       "other metadata keys); keep the shards of one "
                                       "conversion together");
      }
      if (has_config) {
        SY_ASSIGN_OR_RETURN(std::string text, shard.ReadText(kCheckpointConfigKey));
        if (text != config) {
          return FailedPreconditionError(mismatch +
                                         "another meta/config); keep the shards of "
                                         "one conversion together");
        }
      }
    }
    for (const CheckpointTensorInfo& t : shard.tensors()) {
      auto [at, inserted] = shard_of_.emplace(t.name, s);
      if (!inserted) {
        return FailedPreconditionError("checkpoint " + shard.path() + ": tensor '" + t.name +
                                       "' is also in " + shards_[at->second]->path() +
                                       "; a tensor belongs to one shard: convert again");
      }
      tensors_.push_back(t);
    }
  }
  std::sort(
      tensors_.begin(), tensors_.end(),
      [](const CheckpointTensorInfo& a, const CheckpointTensorInfo& b) { return a.name < b.name; });
  return Status::Ok();
}

int64_t CheckpointSet::step() const { return shards_.front()->step(); }

const CheckpointTensorInfo* CheckpointSet::FindTensor(std::string_view name) const {
  auto it = shard_of_.find(std::string(name));
  return it == shard_of_.end() ? nullptr : shards_[it->second]->FindTensor(name);
}

const std::string& CheckpointSet::FileOf(std::string_view name) const {
  auto it = shard_of_.find(std::string(name));
  return it == shard_of_.end() ? path_ : shards_[it->second]->path();
}

Status CheckpointSet::ReadTensor(std::string_view name, DType dtype, const Shape& shape,
                                 void* out) const {
  auto it = shard_of_.find(std::string(name));
  // Shard 0 words the error (with the nearest name it holds) when no shard has the tensor.
  const CheckpointReader& shard = *shards_[it == shard_of_.end() ? 0 : it->second];
  return shard.ReadTensor(name, dtype, shape, out);
}

std::vector<std::string> CheckpointSet::MetadataKeys() const {
  return shards_.front()->MetadataKeys();
}

bool CheckpointSet::HasMetadata(std::string_view key) const {
  return shards_.front()->HasMetadata(key);
}

Result<std::string> CheckpointSet::ReadText(std::string_view key) const {
  return shards_.front()->ReadText(key);
}

Result<std::vector<uint8_t>> CheckpointSet::ReadBytes(std::string_view key) const {
  return shards_.front()->ReadBytes(key);
}

}  // namespace sy
