// Convert: one model checkpoint into another format (`switchyard convert`).
//
//   ConvertOptions options{.in = "run/step-00000100.h5", .out = "export/", .to = "hf"};
//   SY_ASSIGN_OR_RETURN(ConvertSummary done, Convert(options));
//
// The input's format is detected (DetectModelFormat); the output's is `to`, or else "native" for
// an output path ending in ".h5", "gguf" for one ending in ".gguf" and "hf" otherwise. The input is
// read and checked whole before anything is written (every tensor present with its shape, no tensor
// left over), and the output is written by its format, which never leaves a partial output under
// `out`: a failed or interrupted conversion leaves `out` absent. `out` must not exist. Tensors are
// streamed one at a time, so memory stays at about the largest tensor.
//
// Ownership: value types. Thread-safety: reentrant; two conversions to one `out` race.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

namespace sy::convert {

struct ConvertOptions {
  std::string in;              // a checkpoint file or directory
  std::string out;             // must not exist
  std::string to;              // Default: "" = by the output's name (.h5, .gguf, else hf)
  std::optional<DType> dtype;  // Default: none = keep each tensor's dtype
  // Default: "" = none. "q8_0" or "q4_0": a block quantization the output format offers
  // (ModelFormat::quantizations(): gguf); excludes `dtype`.
  std::string quantization;
  uint64_t shard_bytes = 0;  // Default: 0 = one file (formats that shard)
  // Default: 0 = not given. N >= 1 (native output only, the default `to` then): the checkpoint
  // laid out for an expert-parallel group of N ranks, one file per rank in the directory `out`
  // (N > 1), or one consolidated file (N = 1); N must divide model.num_experts.
  int ep_size = 0;
  std::function<void(const std::string&)> progress;  // Default: none
};

struct ConvertSummary {
  std::string from, to;  // format names
  size_t tensors = 0;    // tensors read
  uint64_t bytes = 0;    // their bytes as read
};

Result<ConvertSummary> Convert(const ConvertOptions& options);

// Sets options->quantization ("q8_0", "q4_0") or options->dtype ("f32", "bf16", "f16") from the
// text `dtype` (`--dtype` of `switchyard convert`, `dtype=` of switchyard.convert); "" leaves
// both unset. InvalidArgument naming `dtype` otherwise.
Status SetOutputDType(const std::string& dtype, ConvertOptions* options);

}  // namespace sy::convert
