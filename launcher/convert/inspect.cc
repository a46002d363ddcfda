#include "launcher/convert/inspect.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "inference/hf_config.h"
#include "launcher/convert/hf_format.h"
#include "launcher/convert/model_image.h"
#include "launcher/training/train_options.h"
#include "storage/store/checksum.h"

namespace sy::convert {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

}  // namespace

Result<InspectReport> Inspect(const std::string& path, const InspectOptions& options) {
  SY_ASSIGN_OR_RETURN(const ModelFormat* format, DetectModelFormat(path));
  SY_ASSIGN_OR_RETURN(ModelImage image, format->Read(path));
  InspectReport r;
  r.format = format->name();
  r.path = image.path;
  r.config = image.config;
  r.step = image.step;
  std::optional<HfFamily> read_as;
  if (auto it = image.hf_files.find("config.json"); it != image.hf_files.end()) {
    Result<HfModelConfig> hf = ParseHfConfig(it->second, "config.json");
    if (hf.ok()) read_as = hf->family;
  }
  if ((image.format == "hf" || image.format == "gguf") && read_as) {
    r.architecture = std::string(HfFamilyDisplayName(*read_as));
  } else {
    Result<HfFamily> family = ChooseHfFamily(image.config, read_as);
    r.architecture = family.ok() ? "Switchyard MoE (exports as " +
                                       std::string(HfFamilyDisplayName(*family)) + ")"
                                 : "Switchyard MoE (" + family.status().message() + ")";
  }
  for (const auto& [file, text] : image.hf_files) r.side_files.push_back(file);
  r.stored_tensors = image.stored_tensors;
  r.metadata = image.metadata;
  std::vector<uint8_t> buffer;
  for (const ImageTensor& t : image.tensors) {
    TensorReport tr;
    tr.name = t.stored_name;
    tr.switchyard = t.name;
    tr.dtype = t.dtype;
    tr.shape = t.shape;
    tr.bytes = t.bytes();
    if (options.checksums) {
      buffer.assign(static_cast<size_t>(tr.bytes), 0);
      SY_RETURN_IF_ERROR(t.read(buffer));
      tr.crc32c = storage::Crc32c(buffer.data(), buffer.size());
    }
    r.total_bytes += tr.bytes;
    if (t.name.rfind("optim/", 0) == 0) {
      ++r.optimizer_tensors;
    } else {
      r.parameters += t.numel();
    }
    r.tensors.push_back(std::move(tr));
  }
  return r;
}

std::string InspectText(const InspectReport& r) {
  std::string s;
  s += "format:        " + r.format + "\n";
  s += "path:          " + r.path + "\n";
  s += "architecture:  " + r.architecture + "\n";
  s += "config:        " + r.config.ToString() + "\n";
  if (r.format == "native") s += "step:          " + std::to_string(r.step) + "\n";
  if (!r.side_files.empty()) {
    s += "files:        ";
    for (const std::string& f : r.side_files) s += " " + f;
    s += "\n";
  }
  if (!r.metadata.empty()) {
    s += "metadata:\n";
    for (const ModelImage::MetadataEntry& m : r.metadata) {
      s += "  " + m.key + " = " + m.type + " " +
           (m.count > ModelImage::kMaxMetadataArray ? std::to_string(m.count) + " elements"
                                                    : m.value) +
           "\n";
    }
  }
  if (!r.stored_tensors.empty()) {
    s += "stored tensors:\n";
    for (const ModelImage::StoredTensor& t : r.stored_tensors) {
      char line[512];
      std::snprintf(line, sizeof(line), "  %-60s %-5s %-22s %12" PRIu64 "\n", t.name.c_str(),
                    t.type.c_str(), ShapeText(t.shape).c_str(), t.bytes);
      s += line;
    }
  }
  s += "tensors:\n";
  for (const TensorReport& t : r.tensors) {
    char line[512];
    std::snprintf(line, sizeof(line), "  %-60s %-5s %-22s %12" PRIu64 "%s%s\n", t.name.c_str(),
                  std::string(DTypeName(t.dtype)).c_str(), ShapeText(t.shape).c_str(), t.bytes,
                  t.crc32c ? "  crc32c " : "", t.crc32c ? Hex(*t.crc32c).c_str() : "");
    s += line;
  }
  s += "total:         " + std::to_string(r.tensors.size()) + " tensors, " +
       std::to_string(r.total_bytes) + " bytes, " + std::to_string(r.parameters) + " parameters" +
       (r.optimizer_tensors > 0
            ? ", " + std::to_string(r.optimizer_tensors) + " optimizer-state tensors"
            : std::string()) +
       "\n";
  return s;
}

std::string InspectJson(const InspectReport& r) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorReport& t : r.tensors) {
    nlohmann::json j = {{"name", t.name},
                        {"switchyard_name", t.switchyard},
                        {"dtype", std::string(DTypeName(t.dtype))},
                        {"shape", t.shape},
                        {"bytes", t.bytes}};
    if (t.crc32c) j["crc32c"] = Hex(*t.crc32c);
    tensors.push_back(std::move(j));
  }
  nlohmann::json stored = nlohmann::json::array();
  for (const ModelImage::StoredTensor& t : r.stored_tensors) {
    stored.push_back({{"name", t.name}, {"type", t.type}, {"shape", t.shape}, {"bytes", t.bytes}});
  }
  nlohmann::json metadata = nlohmann::json::array();
  for (const ModelImage::MetadataEntry& m : r.metadata) {
    nlohmann::json j = {
        {"key", m.key}, {"type", m.type}, {"value", nlohmann::json::parse(m.value)}};
    if (m.count > 0) j["count"] = m.count;
    metadata.push_back(std::move(j));
  }
  nlohmann::json out = {{"format", r.format},
                        {"path", r.path},
                        {"architecture", r.architecture},
                        {"config", launcher::ModelConfigSchema().ToJson(r.config)},
                        {"step", r.step},
                        {"files", r.side_files},
                        {"tensors", std::move(tensors)},
                        {"total",
                         {{"tensors", r.tensors.size()},
                          {"bytes", r.total_bytes},
                          {"parameters", r.parameters},
                          {"optimizer_tensors", r.optimizer_tensors}}}};
  if (!r.stored_tensors.empty()) out["stored_tensors"] = std::move(stored);
  if (!r.metadata.empty()) out["metadata"] = std::move(metadata);
  return out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace sy::convert
