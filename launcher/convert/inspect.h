// Inspect: what a model checkpoint of any format holds (`switchyard inspect`), as gguf-dump and
// the safetensors metadata viewers show it: the format, the architecture and config, every tensor
// with the name, dtype, shape and bytes the file gives it (and a CRC-32C of its bytes on
// request), and totals. For a format whose file lays tensors out differently (GGUF: stacked
// experts, quantized types) it also lists the file's own tensors, and its metadata keys.
//
// Ownership: value types. Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/convert/model_image.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/model/model_config.h"

namespace sy::convert {

struct InspectOptions {
  bool checksums = false;  // Default: false. Read every tensor and report its CRC-32C
};

struct TensorReport {
  std::string name;        // as stored in the file
  std::string switchyard;  // Switchyard's parameter name
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  std::optional<uint32_t> crc32c;  // with InspectOptions::checksums
};

struct InspectReport {
  std::string format;        // "native", "hf", ...
  std::string path;          // the file or directory read
  std::string architecture;  // "Mixtral", ..., or how a native model exports
  ModelConfig config;
  int64_t step = 0;
  std::vector<TensorReport> tensors;
  std::vector<std::string> side_files;  // Hugging Face files carried (config, tokenizer, ...)
  uint64_t total_bytes = 0;
  int64_t parameters = 0;  // elements of the model's parameters (optimizer state excluded)
  int64_t optimizer_tensors = 0;
  // The file's own layout and metadata (ModelImage::stored_tensors, metadata): GGUF only.
  std::vector<ModelImage::StoredTensor> stored_tensors;
  std::vector<ModelImage::MetadataEntry> metadata;
};

Result<InspectReport> Inspect(const std::string& path, const InspectOptions& options = {});
// For people: a header, one line per tensor, totals.
std::string InspectText(const InspectReport& report);
// The same as one JSON object.
std::string InspectJson(const InspectReport& report);

}  // namespace sy::convert
