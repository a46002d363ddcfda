#include "storage/formats/safetensors_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "runtime/core/temporary_cleanup.h"
#include "storage/formats/text_file.h"
#include "storage/hdf5/durable_replace.h"

namespace sy::storage {
namespace {

using nlohmann::ordered_json;

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

// Removes the temporary file unless released.
Result<uint64_t> TensorBytesOf(const SafetensorsTensorSource& t) {
  uint64_t bytes = SafetensorsDTypeSize(t.dtype);
  bool zero = false;
  for (int64_t d : t.shape) {
    if (d < 0) {
      return InvalidArgumentError("tensor " + Quote(t.name) + " has a negative dimension " +
                                  std::to_string(d));
    }
    if (d == 0) zero = true;
    if (!zero && bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return InvalidArgumentError("tensor " + Quote(t.name) + " is larger than 2^64 bytes");
    }
    bytes *= static_cast<uint64_t>(d);
  }
  return zero ? 0 : bytes;
}

Status WriteAll(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n) return ErrnoError("write", path, errno);
  return Status::Ok();
}

// One file: `members` are indices into `tensors`.
Status WriteFile(const std::string& path, const std::vector<SafetensorsTensorSource>& tensors,
                 const std::vector<uint64_t>& sizes, std::vector<size_t> members,
                 const SafetensorsWriteOptions& options, uint64_t* done, uint64_t total) {
  std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) {
    return SafetensorsDTypeSize(tensors[a].dtype) > SafetensorsDTypeSize(tensors[b].dtype);
  });
  ordered_json header = ordered_json::object();
  if (!options.metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : options.metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t i : members) {
    const SafetensorsTensorSource& t = tensors[i];
    header[t.name] = {{"dtype", std::string(SafetensorsDTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + sizes[i]}}};
    offset += sizes[i];
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  ScopedTemporary temp(TemporaryPathFor(path));
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(temp.path().c_str(), "wbx"));
  if (!f) return CreationError("create", temp.path(), errno);
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));
  SY_RETURN_IF_ERROR(WriteAll(f.get(), prefix, 8, temp.path()));
  SY_RETURN_IF_ERROR(WriteAll(f.get(), text.data(), text.size(), temp.path()));
  std::vector<uint8_t> buffer;
  for (size_t i : members) {
    const SafetensorsTensorSource& t = tensors[i];
    buffer.assign(static_cast<size_t>(sizes[i]), 0);
    if (Status s = t.fill(buffer); !s.ok()) {
      return s.WithContext(path + ": tensor " + Quote(t.name));
    }
    SY_RETURN_IF_ERROR(WriteAll(f.get(), buffer.data(), buffer.size(), temp.path()));
    *done += sizes[i];
    if (options.progress) options.progress(*done, total);
  }
  if (std::fflush(f.get()) != 0) return ErrnoError("write", temp.path(), errno);
  std::FILE* raw = f.release();
  if (std::fclose(raw) != 0) return ErrnoError("close", temp.path(), errno);
  SY_RETURN_IF_ERROR(DurablyReplace(temp.path(), path));
  temp.Release();
  return Status::Ok();
}

Status WriteText(const std::string& path, const std::string& text) {
  ScopedTemporary temp(TemporaryPathFor(path));
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(temp.path().c_str(), "wbx"));
  if (!f) return CreationError("create", temp.path(), errno);
  SY_RETURN_IF_ERROR(WriteAll(f.get(), text.data(), text.size(), temp.path()));
  std::FILE* raw = f.release();
  if (std::fclose(raw) != 0) return ErrnoError("close", temp.path(), errno);
  SY_RETURN_IF_ERROR(DurablyReplace(temp.path(), path));
  temp.Release();
  return Status::Ok();
}

std::string ShardName(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

}  // namespace

Result<std::vector<std::string>> WriteSafetensors(
    const std::string& dir, const std::vector<SafetensorsTensorSource>& tensors,
    const SafetensorsWriteOptions& options) {
  if (tensors.empty()) {
    return InvalidArgumentError(dir + ": no tensors to write; a safetensors checkpoint needs one");
  }
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const SafetensorsTensorSource& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return InvalidArgumentError(dir + ": tensor name " + Quote(t.name) + " is not allowed");
    }
    if (!names.insert(t.name).second) {
      return InvalidArgumentError(dir + ": tensor " + Quote(t.name) + " is given twice");
    }
    SY_ASSIGN_OR_RETURN(uint64_t bytes, TensorBytesOf(t));
    sizes.push_back(bytes);
    total += bytes;
  }
  const bool sharded = options.shard_bytes > 0 && total > options.shard_bytes;
  std::vector<std::vector<size_t>> shards(1);
  if (sharded) {
    uint64_t in_shard = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!shards.back().empty() && in_shard + sizes[i] > options.shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(i);
      in_shard += sizes[i];
    }
  } else {
    for (size_t i = 0; i < tensors.size(); ++i) shards[0].push_back(i);
  }
  uint64_t done = 0;
  std::vector<std::string> written;
  if (!sharded) {
    SY_RETURN_IF_ERROR(
        WriteFile(dir + "/model.safetensors", tensors, sizes, shards[0], options, &done, total));
    written.push_back("model.safetensors");
    return written;
  }
  ordered_json weight_map = ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = ShardName(s, shards.size());
    SY_RETURN_IF_ERROR(
        WriteFile(dir + "/" + name, tensors, sizes, shards[s], options, &done, total));
    written.push_back(name);
    for (size_t i : shards[s]) weight_map[tensors[i].name] = name;
  }
  // transformers sorts the weight map by tensor name.
  ordered_json sorted = ordered_json::object();
  std::vector<std::string> keys(names.begin(), names.end());
  for (const std::string& k : keys) sorted[k] = weight_map[k];
  ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", std::move(sorted)}};
  SY_RETURN_IF_ERROR(WriteText(dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  written.push_back("model.safetensors.index.json");
  return written;
}

}  // namespace sy::storage
