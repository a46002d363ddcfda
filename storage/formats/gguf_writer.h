// GGUF writer: metadata and tensors -> a GGUF v3 file (the layout storage/formats/gguf.h reads).
//
// Tensors are written in the order given, each at the next multiple of the alignment
// (general.alignment when the metadata has it, a u32 power of two; 32 otherwise), zero-padded, as
// ggml's gguf_write_to_file and gguf-py's GGUFWriter do, so reading a file and writing what was
// read gives the same bytes. The file is written to TemporaryPathFor(path) and renamed over
// `path` with DurablyReplace (storage/hdf5/durable_replace.h): a crash leaves the old file or
// none, never a partial one under the final name; on error the temporary file is removed.
//
// Everything is validated before the first byte is written: unique keys, unique tensor names of
// at most 63 bytes, array elements of the array's type (no nested arrays), 1 to 4 dimensions,
// ne[0] a multiple of the type's block size, and each tensor's data of exactly its size.
// InvalidArgument names the key or tensor; IOError names the file.
//
// Ownership: borrows the metadata and tensor data for the call. Thread-safety: one call writes
// one file; `fill` callbacks run on the calling thread, one tensor at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "storage/formats/gguf.h"

namespace sy::storage {

struct GgufTensorToWrite {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // ggml order: ne[0] innermost (a row-major shape reversed)
  // The tensor's bytes: either `data`, or, when `fill` is set, written by fill() into a buffer of
  // exactly the tensor's size just before it is written (so a converter never holds every
  // converted tensor at once).
  std::span<const uint8_t> data;
  std::function<Status(std::span<uint8_t> out)> fill;
};

// `replace_existing` false: AlreadyExists "<path> exists" rather than replacing a file that is
// at `path`, or appears there while writing (`convert` never overwrites).
Status WriteGguf(const std::string& path, std::span<const GgufKeyValue> metadata,
                 std::span<const GgufTensorToWrite> tensors, bool replace_existing = true);

}  // namespace sy::storage
