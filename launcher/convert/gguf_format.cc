#include "launcher/convert/gguf_format.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "inference/gguf_model.h"
#include "inference/gguf_tokenizer.h"
#include "inference/model_loader.h"
#include "launcher/convert/hf_format.h"
#include "storage/formats/ggml_quants.h"

namespace sy::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using storage::GgmlType;
using storage::GgufValue;
using storage::GgufValueType;

std::optional<DType> LosslessDType(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
      return DType::kF32;
    case GgmlType::kF16:
      return DType::kF16;
    case GgmlType::kBF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

Result<GgmlType> ToGgml(DType t, const std::string& what) {
  switch (t) {
    case DType::kF32:
      return GgmlType::kF32;
    case DType::kF16:
      return GgmlType::kF16;
    case DType::kBF16:
      return GgmlType::kBF16;
    default:
      return InvalidArgumentError(what + " is " + std::string(DTypeName(t)) +
                                  "; a GGUF export takes f32, f16 or bf16 weights");
  }
}

json ScalarJson(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kU8:
    case GgufValueType::kU16:
    case GgufValueType::kU32:
    case GgufValueType::kU64:
      return v.u;
    case GgufValueType::kI8:
    case GgufValueType::kI16:
    case GgufValueType::kI32:
    case GgufValueType::kI64:
      return v.i;
    case GgufValueType::kF32:
    case GgufValueType::kF64:
      return v.f;
    case GgufValueType::kBool:
      return v.b;
    case GgufValueType::kString:
      return v.s;
    case GgufValueType::kArray:
      break;
  }
  return nullptr;
}

ModelImage::MetadataEntry Metadata(const storage::GgufKeyValue& kv) {
  ModelImage::MetadataEntry m;
  m.key = kv.key;
  const GgufValue& v = kv.value;
  if (v.type != GgufValueType::kArray) {
    m.type = std::string(storage::GgufValueTypeName(v.type));
    m.value = ScalarJson(v).dump(-1, ' ', false, json::error_handler_t::replace);
    return m;
  }
  m.type = "array[" + std::string(storage::GgufValueTypeName(v.array_type)) + "]";
  m.count = v.array.size();
  json a = nullptr;
  if (m.count <= ModelImage::kMaxMetadataArray) {
    a = json::array();
    for (const GgufValue& e : v.array) a.push_back(ScalarJson(e));
  }
  m.value = a.dump(-1, ' ', false, json::error_handler_t::replace);
  return m;
}

std::string TorchDType(DType t) {
  return t == DType::kBF16 ? "bfloat16" : t == DType::kF16 ? "float16" : "float32";
}

class Gguf final : public ModelFormat {
 public:
  std::string_view name() const override { return "gguf"; }

  std::vector<std::string_view> quantizations() const override { return {"q8_0", "q4_0"}; }

  bool Detect(const std::string& path) const override {
    std::error_code ec;
    return fs::is_regular_file(path, ec) && IsGgufPath(path);
  }

  Result<ModelImage> Read(const std::string& path) const override {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<GgufCheckpoint> owned, GgufCheckpoint::Open(path));
    std::shared_ptr<GgufCheckpoint> ckpt(std::move(owned));
    const HfModelConfig& hf = ckpt->config();
    ModelImage image;
    image.format = "gguf";
    image.path = path;
    image.source = ckpt;
    image.config = hf.config;
    std::set<std::string> used;
    for (const ParameterSpec& p : ModelParameterSpecs(image.config)) {
      const std::string hf_name = HfTensorName(hf.family, p.name);
      if (hf_name.empty()) {
        return UnimplementedError(path + ": parameter " + p.name + " has no " +
                                  std::string(HfFamilyDisplayName(hf.family)) + " tensor");
      }
      Result<const GgufCheckpoint::Entry*> found = ckpt->Find(hf_name);
      if (!found.ok()) {
        return NotFoundError(path + ": tensor \"" + hf_name + "\" is missing (needed for " +
                             p.name + "); the file's tensors do not match its metadata");
      }
      const GgufCheckpoint::Entry& e = **found;
      std::string stored = e.tensor->name;
      if (e.expert >= 0) stored += "[" + std::to_string(e.expert) + "]";
      if (e.shape != p.shape) {
        return InvalidArgumentError(path + ": tensor \"" + stored + "\" has shape " +
                                    Shape{std::span<const int64_t>(e.shape)}.ToString() +
                                    ", the metadata implies " +
                                    Shape{std::span<const int64_t>(p.shape)}.ToString());
      }
      const GgmlType type = e.tensor->type;
      const std::optional<DType> lossless = LosslessDType(type);
      if (!lossless && !storage::GgmlTypeConvertsToF32(type)) {
        return InvalidArgumentError(
            path + ": tensor \"" + stored + "\" has type " +
            std::string(storage::GgmlTypeName(type)) +
            "; weights must be F32, F16, BF16, F64, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K");
      }
      ImageTensor t;
      t.name = p.name;
      t.stored_name = stored;
      t.dtype = lossless.value_or(DType::kF32);
      t.shape = p.shape;
      if (lossless) {
        t.read = [ckpt, hf_name](std::span<uint8_t> out) -> Status {
          SY_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, ckpt->ReadRaw(hf_name));
          if (raw.size() != out.size()) {
            return InternalError(ckpt->where() + ": tensor \"" + hf_name + "\" size changed");
          }
          std::copy(raw.begin(), raw.end(), out.begin());
          return Status::Ok();
        };
      } else {
        t.read = [ckpt, hf_name](std::span<uint8_t> out) -> Status {
          return ckpt->ReadF32(hf_name, std::span<float>(reinterpret_cast<float*>(out.data()),
                                                         out.size() / sizeof(float)));
        };
      }
      if (p.name == "embed_tokens" && lossless) image.hf_dtype = *lossless;
      image.tensors.push_back(std::move(t));
      used.insert(hf_name);
    }
    for (const std::string& n : ckpt->TensorNames()) {
      if (used.count(n)) continue;
      if (n == "lm_head.weight" && image.config.tie_word_embeddings) continue;
      return InvalidArgumentError(path + ": unexpected tensor \"" + n + "\" for a " +
                                  std::string(GgufArchitecture(hf.family)) +
                                  " model with this metadata");
    }
    json original = json::object();
    if (hf.max_position_embeddings > 0) {
      original["max_position_embeddings"] = hf.max_position_embeddings;
    }
    SY_ASSIGN_OR_RETURN(image.hf_files["config.json"],
                        HfConfigJson(hf.family, image.config, original.dump(),
                                     TorchDType(image.hf_dtype.value_or(DType::kF32))));
    // The tokenizer.ggml.* keys as the Hugging Face files they stand for, so that gguf -> hf writes
    // a tokenizer and gguf -> gguf writes the keys again.
    // A tokenizer this reader does not run (another model or pre-tokenizer) or cannot read
    // (malformed metadata, which llama.cpp refuses too) is left behind, saying why: the weights
    // still convert and inspect.
    Result<std::map<std::string, std::string>> tokenizer =
        GgufTokenizerFiles(ckpt->file().header(), path);
    if (tokenizer.ok()) {
      image.hf_files.merge(*tokenizer);
    } else {
      image.notes.push_back("the tokenizer is not carried: " + tokenizer.status().ToString());
    }
    const storage::GgufHeader& header = ckpt->file().header();
    for (const storage::GgufTensorInfo& t : header.tensors) {
      image.stored_tensors.push_back(
          {t.name, std::string(storage::GgmlTypeName(t.type)), t.shape(), t.bytes});
    }
    for (const storage::GgufKeyValue& kv : header.metadata) {
      image.metadata.push_back(Metadata(kv));
    }
    return image;
  }

  Status Write(const ModelImage& image, const std::string& out,
               const WriteOptions& options) const override {
    std::optional<HfModelConfig> source;
    if (auto it = image.hf_files.find("config.json"); it != image.hf_files.end()) {
      Result<HfModelConfig> parsed = ParseHfConfig(it->second, "the source's config.json");
      if (parsed.ok()) source = *parsed;
    }
    SY_ASSIGN_OR_RETURN(
        HfFamily family,
        ChooseHfFamily(image.config,
                       source ? std::optional<HfFamily>(source->family) : std::nullopt));
    HfModelConfig hf;
    hf.family = family;
    hf.config = image.config;
    if (source && source->family == family) {
      hf.max_position_embeddings = source->max_position_embeddings;
    }
    GgufExportOptions gguf;
    gguf.replace_existing = false;  // convert never overwrites
    if (!options.quantization.empty()) {
      if (options.quantization == "q8_0") {
        gguf.type = GgmlType::kQ8_0;
      } else if (options.quantization == "q4_0") {
        gguf.type = GgmlType::kQ4_0;
      } else {
        return InvalidArgumentError("gguf: unknown quantization '" + options.quantization +
                                    "'; use q8_0 or q4_0");
      }
    } else if (options.dtype) {
      SY_ASSIGN_OR_RETURN(gguf.type, ToGgml(*options.dtype, "--dtype"));
    }
    SY_RETURN_IF_ERROR(RefuseExistingOutput(out));
    Result<std::vector<storage::GgufKeyValue>> tokenizer =
        GgufTokenizerMetadata(image.hf_files, image.config.vocab_size, image.path);
    if (tokenizer.ok()) {
      gguf.extra_metadata = std::move(*tokenizer);
    } else if (tokenizer.status().code() == StatusCode::kUnimplemented ||
               tokenizer.status().code() == StatusCode::kUnavailable) {
      // The weights convert without it; llama.cpp then cannot tokenize text for the file.
      if (options.progress) {
        options.progress("gguf: no tokenizer metadata: " + tokenizer.status().message());
      }
    } else {
      return tokenizer.status().WithContext("writing " + out);
    }
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<HfTensorView> views;
    buffers.reserve(image.tensors.size());
    size_t skipped = 0;
    for (const ImageTensor& t : image.tensors) {
      if (t.name.rfind("optim/", 0) == 0) {
        ++skipped;
        continue;
      }
      HfTensorView v;
      v.name = HfTensorName(family, t.name);
      if (v.name.empty()) {
        return UnimplementedError(out + ": tensor " + t.name + " has no " +
                                  std::string(HfFamilyDisplayName(family)) + " name");
      }
      SY_ASSIGN_OR_RETURN(v.type, ToGgml(t.dtype, image.path + ": tensor " + t.stored_name));
      v.shape = t.shape;
      buffers.emplace_back(static_cast<size_t>(t.bytes()));
      if (Status s = t.read(buffers.back()); !s.ok()) return s.WithContext("writing " + out);
      v.bytes = buffers.back();
      views.push_back(std::move(v));
    }
    if (skipped > 0 && options.progress) {
      options.progress("gguf: " + std::to_string(skipped) +
                       " optimizer-state tensors left out (a GGUF holds weights only)");
    }
    if (Status s = WriteGgufFromHf(hf, views, out, gguf); !s.ok()) {
      return s.WithContext("writing " + out);
    }
    return Status::Ok();
  }
};

}  // namespace

const ModelFormat& GgufFormat() {
  static const Gguf format;
  return format;
}

}  // namespace sy::convert
