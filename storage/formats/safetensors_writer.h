// Safetensors writer: the inverse of storage/formats/safetensors.h, for one file or a sharded
// checkpoint with model.safetensors.index.json, as Hugging Face's save_pretrained writes them.
//
//   std::vector<SafetensorsTensorSource> tensors = ...;  // name, dtype, shape, a fill callback
//   SY_ASSIGN_OR_RETURN(std::vector<std::string> files,
//                       WriteSafetensors(dir, tensors, {.shard_bytes = 5 << 30}));
//
// Layout of each file: u64 little-endian header length N, N bytes of JSON ("__metadata__" first,
// then the tensors in data order), padded with spaces to a multiple of 8, then the data buffer.
// Within a file the tensors are ordered by dtype size, largest first, then in the order given,
// so every tensor starts at an offset aligned to its element size (as the reference writer
// does). With shard_bytes > 0 and more data than that, the tensors (in the order given) are cut
// into shards "model-00001-of-0000N.safetensors" of at most shard_bytes of data each (a tensor
// larger than that gets a shard of its own), and "model.safetensors.index.json" holds
// {"metadata": {"total_size": bytes of all tensors}, "weight_map": {tensor: shard}}; otherwise
// the one file is "model.safetensors".
//
// Atomicity: each file is written to "<file>.tmp.<pid>" and moved over its final name with
// DurablyReplace (fsync, rename, fsync the directory), the index last; a failed write removes its
// temporary file. A crash therefore never leaves a half-written file under a final name (a caller
// that needs the whole directory to appear at once writes it into a staging directory and renames
// that: launcher/convert does).
//
// Every tensor's fill is called once, in file order, with a buffer of exactly
// product(shape) * dtype size bytes to fill with little-endian values; a fill that fails stops
// the write and its Status (with the file and tensor named) is returned.
//
// Ownership: nothing is kept. Thread-safety: reentrant; two writes into the same directory race.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "storage/formats/safetensors.h"

namespace sy::storage {

struct SafetensorsTensorSource {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  std::function<Status(std::span<uint8_t> out)> fill;
};

struct SafetensorsWriteOptions {
  // Default: 0 = one file. Data bytes per shard above which the checkpoint is sharded.
  uint64_t shard_bytes = 0;
  // Default: {"format": "pt"} (what transformers writes). The "__metadata__" of every file.
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  // Default: none. Called after each tensor is written, with the bytes written so far and the
  // total.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// Writes `tensors` into the existing directory `dir`. Returns the file names written (the shards,
// then the index), relative to `dir`. InvalidArgument for an empty list, a duplicate or empty
// name, or a negative dimension; IOError naming the file when writing fails.
Result<std::vector<std::string>> WriteSafetensors(
    const std::string& dir, const std::vector<SafetensorsTensorSource>& tensors,
    const SafetensorsWriteOptions& options = {});

}  // namespace sy::storage
