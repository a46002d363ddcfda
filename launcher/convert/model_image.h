// ModelImage: a model checkpoint of any format, as the formats agree on it, and ModelFormat: how
// `switchyard convert` and `switchyard inspect` read and write one format.
//
// A ModelImage holds the architecture (ModelConfig), its tensors under Switchyard's parameter
// names (runtime/model/parameter_store.h; optimizer state as optim/m/<name>, optim/v/<name>,
// optim/steps), each with the name the source file gives it, its dtype and shape and a reader
// that fills a buffer with its bytes on demand (nothing is loaded until written or checksummed),
// plus what the formats carry besides tensors: the training run's config and step, and the
// Hugging Face side files (config.json as read, generation_config.json, tokenizer files).
//
// Formats (ModelFormats()): "native" (launcher/convert/native_format.h, the HDF5 training
// checkpoint), "hf" (launcher/convert/hf_format.h, a Hugging Face directory) and "gguf"
// (launcher/convert/gguf_format.h, llama.cpp's GGUF file). Another format
// plugs in by implementing ModelFormat and adding one line to ModelFormats() in model_image.cc;
// convert and inspect then detect it, read it and write it with no other change.
//
// Ownership: a ModelImage owns its source (the open files, through `source`); its tensors' read
// callbacks are valid while it lives. Thread-safety: one thread per image.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/model/model_config.h"

namespace sy::convert {

// A parameter of MoeModel for a config: its name and shape, in the model's registration order.
struct ParameterSpec {
  std::string name;
  std::vector<int64_t> shape;
};
// Every parameter of a model with `config`, in MoeModel's order, without building it (the
// convert tests check it against MoeModel::Create).
std::vector<ParameterSpec> ModelParameterSpecs(const ModelConfig& config);

struct ImageTensor {
  std::string name;         // Switchyard's name: "layers/0/attn/wq", "optim/m/embed_tokens"
  std::string stored_name;  // the source file's name: "model.layers.0.self_attn.q_proj.weight"
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // Fills `out` (exactly bytes() long) with the tensor's little-endian bytes in `dtype`. Errors
  // name the file and the tensor.
  std::function<Status(std::span<uint8_t> out)> read;
  uint64_t bytes() const;
  int64_t numel() const;
};

struct ModelImage {
  std::string format;  // the ModelFormat's name that read it
  std::string path;    // the file or directory read
  ModelConfig config;  // validated
  // Tensors: the parameters in ParameterSpec order, then optimizer state (m, v per parameter,
  // then optim/steps), when the source has it.
  std::vector<ImageTensor> tensors;
  int64_t step = 0;               // optimizer steps taken (native); 0 otherwise
  std::string train_config_json;  // native: the run's effective config; "" otherwise
  std::string data_position;      // native: the Batcher position; "" otherwise
  std::optional<uint64_t> seed;   // native: the run's seed
  // Hugging Face files by name ("config.json" as read, "generation_config.json",
  // "tokenizer.json", ...): read from an hf directory, or carried in a native checkpoint's
  // metadata so that hf -> native -> hf gives them back.
  std::map<std::string, std::string> hf_files;
  // The float dtype the Hugging Face checkpoint it came from stored its weights in (hf, or
  // native converted from hf), so that hf -> native -> hf writes them back in it by default.
  std::optional<DType> hf_dtype;
  // What `switchyard inspect` shows of the file as its format lays it out, where that differs
  // from `tensors` (GGUF: experts stacked, quantized types, the metadata keys); empty otherwise.
  struct StoredTensor {
    std::string name;            // as in the file: "blk.0.ffn_gate_exps.weight"
    std::string type;            // as the format spells it: "F32", "Q8_0"
    std::vector<int64_t> shape;  // row-major
    uint64_t bytes = 0;
  };
  std::vector<StoredTensor> stored_tensors;
  struct MetadataEntry {
    std::string key;
    std::string type;    // "u32", "string", "array[string]"
    std::string value;   // as JSON; an array of more than kMaxMetadataArray elements: "null"
    uint64_t count = 0;  // an array's element count; 0 for a scalar
  };
  static constexpr uint64_t kMaxMetadataArray = 64;
  std::vector<MetadataEntry> metadata;
  // What the reader found but could not carry (a GGUF tokenizer it does not run), for the user:
  // convert prints each as progress.
  std::vector<std::string> notes;
  std::shared_ptr<void> source;  // keeps the open files alive for the read callbacks

  const ImageTensor* Find(std::string_view name) const;
};

struct WriteOptions {
  // Default: none = each tensor keeps its dtype. f32, bf16 or f16: the float tensors'
  // dtype in the output (a format may accept only some).
  std::optional<DType> dtype;
  // Default: 0 = no sharding. Data bytes per file above which a format that shards does.
  uint64_t shard_bytes = 0;
  // Default: "" = none. A block quantization ("q8_0", "q4_0") of the formats whose
  // quantizations() list it; then `dtype` is unset.
  std::string quantization;
  // Default: 0 = the format's one layout. For native, N >= 1: the checkpoint as N expert-parallel
  // shards (a directory of N files, storage/hdf5/checkpoint_layout.h), 1 = one consolidated file.
  int ep_size = 0;
  // Default: none. One line of progress, for people.
  std::function<void(const std::string& line)> progress;
};

class ModelFormat {
 public:
  virtual ~ModelFormat() = default;
  virtual std::string_view name() const = 0;  // "native", "hf", ...
  // The block quantizations Write accepts in WriteOptions::quantization. Default: none.
  virtual std::vector<std::string_view> quantizations() const { return {}; }
  // Whether `path` looks like this format (cheap: names and magic bytes, no parsing).
  virtual bool Detect(const std::string& path) const = 0;
  // Opens `path` and checks it: every tensor present with its shape and a dtype the format
  // allows, no tensor the architecture does not use. Errors name the file and the tensor.
  virtual Result<ModelImage> Read(const std::string& path) const = 0;
  // Writes `image` at `out`, which must not exist. Never leaves a partial output under `out`:
  // a failed write removes what it staged. Errors name the output and the tensor.
  virtual Status Write(const ModelImage& image, const std::string& out,
                       const WriteOptions& options) const = 0;
};

// Every format, in detection order.
const std::vector<const ModelFormat*>& ModelFormats();
// The format called `name`; InvalidArgument listing the formats otherwise.
Result<const ModelFormat*> FindModelFormat(std::string_view name);
// The format of `path`; NotFound when it does not exist, InvalidArgument when no format claims it.
Result<const ModelFormat*> DetectModelFormat(const std::string& path);

// AlreadyExists "<out> exists; choose a new --out (convert never overwrites)" when anything is at
// `out`, a symbolic link (dangling or not) included. Each Write checks it first; the final rename
// never replaces either (runtime/core/file_creation.h).
Status RefuseExistingOutput(const std::string& out);

// `tensor`'s bytes converted to `dtype` (f32, bf16 or f16, from any of those; other dtypes only
// to themselves). Float widening is exact; narrowing rounds to nearest even.
Status ReadTensorAs(const ImageTensor& tensor, DType dtype, std::span<uint8_t> out);

}  // namespace sy::convert
