#include "storage/formats/safetensors.h"

#include "storage/formats/text_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "runtime/core/read_file.h"

namespace sy::storage {
namespace {

using nlohmann::json;

struct DTypeEntry {
  SafetensorsDType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {SafetensorsDType::kBool, "BOOL", 1},      {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},          {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1}, {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},        {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},      {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},        {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kF64, "F64", 8},        {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
};

const DTypeEntry& Entry(SafetensorsDType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // unreachable: every enumerator is in the table
}

// Reads a JSON number that must be a non-negative integer.
bool AsUint64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = static_cast<uint64_t>(i);
    return true;
  }
  return false;
}

Status ParseTensorEntry(const std::string& name, const json& entry, uint64_t data_bytes,
                        std::string_view file, SafetensorsTensorInfo* info) {
  const std::string where = std::string(file) + ": tensor " + Quote(name);
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError(where + ": " + why +
                                "; the file is corrupt or was written by a broken exporter");
  };
  if (!entry.is_object()) return bad("entry is not an object");
  info->name = name;
  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) return bad("no string \"dtype\"");
  Result<SafetensorsDType> dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
  if (!dtype.ok()) return dtype.status().WithContext(where);
  info->dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) return bad("no array \"shape\"");
  // numel * dtype size must fit in u64; track it with overflow checks.
  uint64_t bytes = SafetensorsDTypeSize(info->dtype);
  bool overflow = false;
  for (const json& d : *shape_it) {
    uint64_t dim = 0;
    if (!AsUint64(d, &dim) || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad("shape entry " + d.dump() + " is not a non-negative integer");
    }
    info->shape.push_back(static_cast<int64_t>(dim));
    if (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
    bytes *= dim;
  }
  // A zero dimension makes the size 0 even if earlier dimensions overflowed.
  if (std::find(info->shape.begin(), info->shape.end(), 0) != info->shape.end()) {
    bytes = 0;
    overflow = false;
  }

  auto off_it = entry.find("data_offsets");
  if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2) {
    return bad("no \"data_offsets\" pair [begin, end]");
  }
  if (!AsUint64((*off_it)[0], &info->begin) || !AsUint64((*off_it)[1], &info->end)) {
    return bad("data_offsets are not non-negative integers");
  }
  if (info->end < info->begin) {
    return bad("data_offsets end " + std::to_string(info->end) + " is before begin " +
               std::to_string(info->begin));
  }
  if (info->end > data_bytes) {
    return bad("data_offsets end " + std::to_string(info->end) + " is past the data buffer (" +
               std::to_string(data_bytes) + " bytes): the file is truncated");
  }
  if (overflow || bytes != info->end - info->begin) {
    return bad("shape " + shape_it->dump() + " x " +
               std::string(SafetensorsDTypeName(info->dtype)) + " needs " +
               (overflow ? std::string("more than 2^64") : std::to_string(bytes)) +
               " bytes but data_offsets span " + std::to_string(info->end - info->begin));
  }
  return Status::Ok();
}

}  // namespace

std::string_view SafetensorsDTypeName(SafetensorsDType dtype) { return Entry(dtype).name; }
size_t SafetensorsDTypeSize(SafetensorsDType dtype) { return Entry(dtype).size; }

Result<SafetensorsDType> ParseSafetensorsDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  return InvalidArgumentError("unknown safetensors dtype " + Quote(name) +
                              "; supported: BOOL, U8, I8, F8_E4M3, F8_E5M2, I16, U16, F16, BF16, "
                              "I32, U32, F32, F64, I64, U64");
}

int64_t SafetensorsTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const SafetensorsTensorInfo* SafetensorsHeader::Find(std::string_view name) const {
  auto it = std::lower_bound(
      tensors.begin(), tensors.end(), name,
      [](const SafetensorsTensorInfo& t, std::string_view n) { return t.name < n; });
  if (it == tensors.end() || it->name != name) return nullptr;
  return &*it;
}

Result<SafetensorsHeader> ParseSafetensorsHeaderJson(std::string_view text, uint64_t data_bytes,
                                                     std::string_view file) {
  if (text.empty() || text.front() != '{') {
    return InvalidArgumentError(std::string(file) +
                                ": the safetensors header does not start with '{'; this is not a "
                                "safetensors file, or it is corrupt");
  }
  SY_ASSIGN_OR_RETURN(json root, ParseStrictJson(text, file, "the safetensors header"));
  if (!root.is_object()) {
    return InvalidArgumentError(std::string(file) + ": the safetensors header is not an object");
  }
  SafetensorsHeader header;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) {
        return InvalidArgumentError(std::string(file) +
                                    ": \"__metadata__\" is not an object of strings");
      }
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return InvalidArgumentError(std::string(file) + ": \"__metadata__\" value of " +
                                      Quote(m.key()) + " is not a string");
        }
        header.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    SafetensorsTensorInfo info;
    SY_RETURN_IF_ERROR(ParseTensorEntry(it.key(), *it, data_bytes, file, &info));
    header.tensors.push_back(std::move(info));
  }
  // The tensors must tile the data buffer: sorted by offset, each starts where the last ended.
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const SafetensorsTensorInfo& t : header.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsTensorInfo* a, const SafetensorsTensorInfo* b) {
              return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
            });
  uint64_t expected = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const SafetensorsTensorInfo* t : by_offset) {
    if (t->begin != expected) {
      const std::string what = t->begin < expected ? "overlaps" : "leaves a gap after";
      return InvalidArgumentError(
          std::string(file) + ": tensor " + Quote(t->name) + " at data_offsets [" +
          std::to_string(t->begin) + ", " + std::to_string(t->end) + ") " + what + " " +
          (previous ? "tensor " + Quote(previous->name) : std::string("the buffer start")) +
          " (which ends at " + std::to_string(expected) +
          "); the file is corrupt or was written by a broken exporter");
    }
    expected = t->end;
    previous = t;
  }
  if (expected != data_bytes) {
    return InvalidArgumentError(std::string(file) + ": the tensors cover " +
                                std::to_string(expected) + " bytes of the " +
                                std::to_string(data_bytes) +
                                "-byte data buffer; the file has trailing bytes or is corrupt");
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
              return a.name < b.name;
            });
  return header;
}

Result<SafetensorsHeader> ParseSafetensorsImage(std::span<const uint8_t> image,
                                                std::string_view file) {
  if (image.size() < 8) {
    return InvalidArgumentError(std::string(file) + ": " + std::to_string(image.size()) +
                                " bytes is too short for a safetensors file (it starts with an "
                                "8-byte header length); the file is truncated");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | image[static_cast<size_t>(i)];
  if (n > kSafetensorsMaxHeaderBytes) {
    return InvalidArgumentError(std::string(file) + ": header length " + std::to_string(n) +
                                " exceeds the format's cap of " +
                                std::to_string(kSafetensorsMaxHeaderBytes) +
                                " bytes; this is not a safetensors file, or it is corrupt");
  }
  if (n > image.size() - 8) {
    return InvalidArgumentError(std::string(file) + ": header length " + std::to_string(n) +
                                " runs past the end of the " + std::to_string(image.size()) +
                                "-byte file; the file is truncated");
  }
  std::string_view text(reinterpret_cast<const char*>(image.data() + 8), static_cast<size_t>(n));
  SY_ASSIGN_OR_RETURN(SafetensorsHeader header,
                      ParseSafetensorsHeaderJson(text, image.size() - 8 - n, file));
  header.header_bytes = n;
  header.data_offset = 8 + n;
  return header;
}

Status ConvertToF32(const TensorBytes& tensor, std::span<float> out) {
  const SafetensorsTensorInfo& info = *tensor.info;
  const std::string where =
      (tensor.file ? *tensor.file + ": " : std::string()) + "tensor " + Quote(info.name);
  const size_t n = static_cast<size_t>(info.numel());
  if (out.size() != n) {
    return InvalidArgumentError(where + ": has " + std::to_string(n) + " elements, expected " +
                                std::to_string(out.size()));
  }
  const uint8_t* src = tensor.bytes.data();
  switch (info.dtype) {
    case SafetensorsDType::kF32:
      if (n > 0) std::memcpy(out.data(), src, n * 4);
      return Status::Ok();
    case SafetensorsDType::kBF16:
    case SafetensorsDType::kF16: {
      // The mapped data may be unaligned: copy 16-bit values out in chunks first.
      constexpr size_t kChunk = 4096;
      uint16_t bits[kChunk];
      for (size_t i = 0; i < n; i += kChunk) {
        const size_t m = std::min(kChunk, n - i);
        std::memcpy(bits, src + i * 2, m * 2);
        if (info.dtype == SafetensorsDType::kBF16) {
          ConvertBF16ToF32(reinterpret_cast<const BF16*>(bits), out.data() + i, m);
        } else {
          ConvertF16ToF32(reinterpret_cast<const F16*>(bits), out.data() + i, m);
        }
      }
      return Status::Ok();
    }
    case SafetensorsDType::kF64:
      for (size_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, src + i * 8, 8);
        out[i] = static_cast<float>(v);
      }
      return Status::Ok();
    case SafetensorsDType::kBool:
    case SafetensorsDType::kU8:
    case SafetensorsDType::kI8:
    case SafetensorsDType::kF8E4M3:
    case SafetensorsDType::kF8E5M2:
    case SafetensorsDType::kI16:
    case SafetensorsDType::kU16:
    case SafetensorsDType::kI32:
    case SafetensorsDType::kU32:
    case SafetensorsDType::kI64:
    case SafetensorsDType::kU64:
      break;
  }
  return InvalidArgumentError(where + ": dtype " + std::string(SafetensorsDTypeName(info.dtype)) +
                              " cannot be loaded as a float weight; supported: F32, F16, BF16, "
                              "F64 (quantised checkpoints are not supported, use a bf16 one)");
}

// ---- SafetensorsFile ----

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  Result<MappedFile> map = MappedFile::Open(path);
  if (!map.ok()) return map.status().WithContext("safetensors file");
  SY_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsImage(map->bytes(), path));
  return std::unique_ptr<SafetensorsFile>(
      new SafetensorsFile(std::move(map).value(), std::move(header)));
}

Result<TensorBytes> SafetensorsFile::Get(std::string_view name) const {
  const SafetensorsTensorInfo* info = header_.Find(name);
  if (info == nullptr) {
    return NotFoundError(path() + ": no tensor " + Quote(name));
  }
  TensorBytes t;
  t.info = info;
  t.bytes = {map_.data() + header_.data_offset + info->begin, info->end - info->begin};
  t.file = &map_.path();
  return t;
}

// ---- index and checkpoint ----

Status CheckShardName(std::string_view shard, std::string_view tensor,
                      std::string_view index_file) {
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError(std::string(index_file) + ": tensor " + Quote(tensor) +
                                " names shard " + Quote(shard) + ", which " + why +
                                "; shard names must be plain files inside the model directory");
  };
  if (shard.empty()) return bad("is empty");
  if (shard.front() == '/') return bad("is an absolute path");
  if (shard.find('\0') != std::string_view::npos) return bad("contains a NUL byte");
  if (shard.find('\\') != std::string_view::npos) return bad("contains a backslash");
  size_t begin = 0;
  while (begin <= shard.size()) {
    size_t slash = shard.find('/', begin);
    if (slash == std::string_view::npos) slash = shard.size();
    const std::string_view part = shard.substr(begin, slash - begin);
    if (part == "..") return bad("escapes the model directory with \"..\"");
    if (part.empty() || part == ".") return bad("has an empty or \".\" path component");
    begin = slash + 1;
  }
  return Status::Ok();
}

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view text,
                                                                 std::string_view file) {
  SY_ASSIGN_OR_RETURN(json root, ParseStrictJson(text, file, "the index"));
  if (!root.is_object()) return InvalidArgumentError(std::string(file) + ": not a JSON object");
  auto it = root.find("weight_map");
  if (it == root.end() || !it->is_object()) {
    return InvalidArgumentError(std::string(file) +
                                ": no \"weight_map\" object; a sharded safetensors index maps "
                                "each tensor name to its shard file under \"weight_map\"");
  }
  std::map<std::string, std::string> map;
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (!e->is_string()) {
      return InvalidArgumentError(std::string(file) + ": weight_map entry " + Quote(e.key()) +
                                  " is not a file name string");
    }
    std::string shard = e->get<std::string>();
    SY_RETURN_IF_ERROR(CheckShardName(shard, e.key(), file));
    map[e.key()] = std::move(shard);
  }
  if (map.empty()) {
    return InvalidArgumentError(std::string(file) + ": \"weight_map\" is empty");
  }
  return map;
}

namespace {

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(const std::string& dir) {
  auto ckpt = std::make_unique<SafetensorsCheckpoint>();
  ckpt->dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  if (FileExists(index_path)) {
    SY_ASSIGN_OR_RETURN(std::string text,
                        ReadFile(index_path, kSafetensorsMaxHeaderBytes, "a model index"));
    SY_ASSIGN_OR_RETURN(auto weight_map, ParseSafetensorsIndex(text, index_path));
    std::map<std::string, size_t> shard_index;
    for (const auto& [tensor, shard] : weight_map) {
      if (shard_index.count(shard)) continue;
      SY_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir + "/" + shard));
      shard_index[shard] = ckpt->files_.size();
      ckpt->files_.push_back(std::move(file));
    }
    for (const auto& [tensor, shard] : weight_map) {
      const size_t i = shard_index.at(shard);
      if (ckpt->files_[i]->header().Find(tensor) == nullptr) {
        return DataLossError(index_path + ": tensor " + Quote(tensor) + " is mapped to shard " +
                             Quote(shard) +
                             ", which does not hold it; the index and shards "
                             "are from different exports, re-download the model");
      }
      ckpt->where_[tensor] = i;
    }
    // A tensor the index does not list, or lists in another shard, would be silently ignored;
    // report it instead.
    for (size_t i = 0; i < ckpt->files_.size(); ++i) {
      for (const SafetensorsTensorInfo& t : ckpt->files_[i]->header().tensors) {
        auto it = ckpt->where_.find(t.name);
        if (it == ckpt->where_.end()) {
          return DataLossError(ckpt->files_[i]->path() + ": tensor " + Quote(t.name) +
                               " is not in the index " + index_path +
                               "; the index and shards are from different exports");
        }
        if (it->second != i) {
          return DataLossError("tensor " + Quote(t.name) + " is in both " +
                               ckpt->files_[it->second]->path() + " and " +
                               ckpt->files_[i]->path() + "; remove one copy");
        }
      }
    }
    return ckpt;
  }
  if (!FileExists(single_path)) {
    return NotFoundError(dir +
                         " has neither model.safetensors nor "
                         "model.safetensors.index.json; point --model at a Hugging Face "
                         "model directory");
  }
  SY_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
  for (const SafetensorsTensorInfo& t : file->header().tensors) ckpt->where_[t.name] = 0;
  ckpt->files_.push_back(std::move(file));
  return ckpt;
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, file] : where_) names.push_back(name);
  return names;
}

Result<TensorBytes> SafetensorsCheckpoint::Get(std::string_view name) const {
  auto it = where_.find(std::string(name));
  if (it == where_.end()) return NotFoundError(dir_ + ": no tensor " + Quote(name));
  return files_[it->second]->Get(name);
}

}  // namespace sy::storage
