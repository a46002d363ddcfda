#include "storage/formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "storage/formats/text_file.h"

namespace sy::storage {
namespace {

struct TypeEntry {
  GgmlType type;
  std::string_view name;
  int64_t block;
  int64_t size;
};

// Block sizes and bytes per block, as ggml's type_traits (and gguf-py's GGML_QUANT_SIZES) give
// them. QK_K = 256.
constexpr TypeEntry kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},
    {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 2 + 16},
    {GgmlType::kQ4_1, "Q4_1", 32, 2 + 2 + 16},
    {GgmlType::kQ5_0, "Q5_0", 32, 2 + 4 + 16},
    {GgmlType::kQ5_1, "Q5_1", 32, 2 + 2 + 4 + 16},
    {GgmlType::kQ8_0, "Q8_0", 32, 2 + 32},
    {GgmlType::kQ8_1, "Q8_1", 32, 4 + 4 + 32},
    {GgmlType::kQ2_K, "Q2_K", 256, 2 + 2 + 256 / 16 + 256 / 4},
    {GgmlType::kQ3_K, "Q3_K", 256, 2 + 256 / 4 + 256 / 8 + 12},
    {GgmlType::kQ4_K, "Q4_K", 256, 2 + 2 + 256 / 2 + 12},
    {GgmlType::kQ5_K, "Q5_K", 256, 2 + 2 + 256 / 2 + 256 / 8 + 12},
    {GgmlType::kQ6_K, "Q6_K", 256, 2 + 256 / 2 + 256 / 4 + 256 / 16},
    {GgmlType::kQ8_K, "Q8_K", 256, 4 + 256 + 256 / 8},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 2 + 256 / 4},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 2 + 256 / 4 + 256 / 32},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 2 + 256 / 4 + 256 / 8},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 2 + 256 / 8 + 256 / 16},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 2 + 16},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 2 + 256 / 4 + 256 / 8 + 256 / 32 + 4},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 2 + 256 / 4 + 256 / 16},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 2 + 2 + 256 / 2 + 256 / 64},
    {GgmlType::kI8, "I8", 1, 1},
    {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},
    {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 256 / 8 + 256 / 16 + 256 / 32},
    {GgmlType::kBF16, "BF16", 1, 2},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 2 + 4 * 13},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 2 + 64},
};

const TypeEntry* FindType(uint32_t number) {
  for (const TypeEntry& e : kTypes) {
    if (static_cast<uint32_t>(e.type) == number) return &e;
  }
  return nullptr;
}

const TypeEntry& Entry(GgmlType type) {
  const TypeEntry* e = FindType(static_cast<uint32_t>(type));
  return e ? *e : kTypes[0];  // every enumerator is in the table
}

// Bytes of one scalar of a metadata type; 0 for string and array.
size_t ScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool KnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

// A bounds-checked little-endian cursor over the image. Every read fails instead of running past
// the end; the caller turns the failure into a Status naming what it was reading.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> image) : image_(image) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return image_.size() - pos_; }

  template <typename T>
  bool Read(T* out) {
    if (left() < sizeof(T)) return false;
    std::memcpy(out, image_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string* out, uint64_t* length) {
    if (!Read(length)) return false;
    if (*length > left()) return false;
    out->assign(reinterpret_cast<const char*>(image_.data() + pos_), static_cast<size_t>(*length));
    pos_ += *length;
    return true;
  }

 private:
  std::span<const uint8_t> image_;
  uint64_t pos_ = 0;
};

class Parser {
 public:
  Parser(std::span<const uint8_t> image, std::string_view file) : c_(image), file_(file) {}

  Status Fail(const std::string& what) const {
    return InvalidArgumentError(std::string(file_) + ": " + what +
                                "; the file is not GGUF, is truncated, or is corrupt");
  }
  Status Truncated(const std::string& what) const {
    return InvalidArgumentError(std::string(file_) + ": " + what + " runs past the end of the " +
                                std::to_string(c_.pos() + c_.left()) + "-byte file (at byte " +
                                std::to_string(c_.pos()) + "); the file is truncated or corrupt");
  }

  Status ReadScalar(GgufValueType type, GgufValue* v, const std::string& where) {
    v->type = type;
    bool ok = true;
    switch (type) {
      case GgufValueType::kU8: {
        uint8_t x = 0;
        ok = c_.Read(&x);
        v->u = x;
        break;
      }
      case GgufValueType::kI8: {
        int8_t x = 0;
        ok = c_.Read(&x);
        v->i = x;
        break;
      }
      case GgufValueType::kU16: {
        uint16_t x = 0;
        ok = c_.Read(&x);
        v->u = x;
        break;
      }
      case GgufValueType::kI16: {
        int16_t x = 0;
        ok = c_.Read(&x);
        v->i = x;
        break;
      }
      case GgufValueType::kU32: {
        uint32_t x = 0;
        ok = c_.Read(&x);
        v->u = x;
        break;
      }
      case GgufValueType::kI32: {
        int32_t x = 0;
        ok = c_.Read(&x);
        v->i = x;
        break;
      }
      case GgufValueType::kU64:
        ok = c_.Read(&v->u);
        break;
      case GgufValueType::kI64:
        ok = c_.Read(&v->i);
        break;
      case GgufValueType::kF32: {
        float x = 0;
        ok = c_.Read(&x);
        v->f = x;
        break;
      }
      case GgufValueType::kF64:
        ok = c_.Read(&v->f);
        break;
      case GgufValueType::kBool: {
        uint8_t x = 0;
        ok = c_.Read(&x);
        if (ok && x > 1)
          return Fail(where + ": bool value " + std::to_string(x) + " is not 0 or 1");
        v->b = x != 0;
        break;
      }
      case GgufValueType::kString: {
        uint64_t n = 0;
        ok = c_.ReadString(&v->s, &n);
        break;
      }
      case GgufValueType::kArray:
        return Fail(where + ": nested arrays are not supported (ggml rejects them too)");
    }
    if (!ok) return Truncated(where + " (" + std::string(GgufValueTypeName(type)) + ")");
    return Status::Ok();
  }

  Status ReadValue(GgufValue* v, const std::string& where) {
    uint32_t t = 0;
    if (!c_.Read(&t)) return Truncated(where + ": value type");
    if (!KnownValueType(t)) return Fail(where + ": unknown value type " + std::to_string(t));
    const auto type = static_cast<GgufValueType>(t);
    if (type != GgufValueType::kArray) return ReadScalar(type, v, where);
    v->type = GgufValueType::kArray;
    uint32_t et = 0;
    uint64_t count = 0;
    if (!c_.Read(&et) || !c_.Read(&count)) return Truncated(where + ": array header");
    if (!KnownValueType(et)) {
      return Fail(where + ": array of unknown value type " + std::to_string(et));
    }
    v->array_type = static_cast<GgufValueType>(et);
    if (v->array_type == GgufValueType::kArray) {
      return Fail(where + ": nested arrays are not supported (ggml rejects them too)");
    }
    // Each element takes at least its scalar size (a string its 8-byte length): a count past what
    // the bytes left can hold is refused before anything is allocated.
    const size_t min_size = v->array_type == GgufValueType::kString ? 8 : ScalarSize(v->array_type);
    if (count > c_.left() / min_size) {
      return Truncated(where + ": array of " + std::to_string(count) + " " +
                       std::string(GgufValueTypeName(v->array_type)));
    }
    // Each element is held as a GgufValue (~100 bytes): cap the file's total so a crafted array
    // of bytes cannot ask for 100x its size in memory.
    array_elements_ += count;
    if (array_elements_ > kGgufMaxArrayElements) {
      return Fail(where + ": the metadata arrays hold more than " +
                  std::to_string(kGgufMaxArrayElements) + " elements in all");
    }
    v->array.resize(static_cast<size_t>(count));
    for (uint64_t k = 0; k < count; ++k) {
      SY_RETURN_IF_ERROR(ReadScalar(v->array_type, &v->array[static_cast<size_t>(k)],
                                    where + "[" + std::to_string(k) + "]"));
    }
    return Status::Ok();
  }

  Result<GgufHeader> Parse() {
    GgufHeader h;
    uint32_t magic = 0;
    if (!c_.Read(&magic)) return Truncated("the magic");
    if (magic != kGgufMagic) return Fail("no GGUF magic at the start");
    if (!c_.Read(&h.version)) return Truncated("the version");
    if (h.version != kGgufVersion) {
      return UnimplementedError(std::string(file_) + ": GGUF version " + std::to_string(h.version) +
                                " is not supported (only version 3); re-convert it with a "
                                "current llama.cpp");
    }
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    if (!c_.Read(&n_tensors) || !c_.Read(&n_kv)) return Truncated("the tensor and KV counts");
    // A KV takes at least 8 + 4 + 1 bytes, a tensor info at least 8 + 4 + 8 + 4 + 8.
    if (n_kv > c_.left() / 13) {
      return Truncated("metadata count " + std::to_string(n_kv) + " (each needs 13+ bytes)");
    }
    if (n_tensors > c_.left() / 32) {
      return Truncated("tensor count " + std::to_string(n_tensors) + " (each needs 32+ bytes)");
    }
    std::set<std::string> keys;
    h.metadata.reserve(static_cast<size_t>(n_kv));
    for (uint64_t k = 0; k < n_kv; ++k) {
      GgufKeyValue kv;
      uint64_t len = 0;
      if (!c_.ReadString(&kv.key, &len)) {
        return Truncated("the key of metadata entry " + std::to_string(k));
      }
      const std::string where = "metadata key " + Quote(kv.key);
      if (!keys.insert(kv.key).second) return Fail(where + " appears twice");
      SY_RETURN_IF_ERROR(ReadValue(&kv.value, where));
      h.metadata.push_back(std::move(kv));
    }
    if (const GgufValue* a = h.Find("general.alignment")) {
      if (a->type != GgufValueType::kU32 || a->u == 0 || (a->u & (a->u - 1)) != 0) {
        return Fail("general.alignment is " + a->Describe() + ", expected a u32 power of two");
      }
      h.alignment = static_cast<uint32_t>(a->u);
    }
    std::set<std::string> names;
    h.tensors.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t k = 0; k < n_tensors; ++k) {
      GgufTensorInfo t;
      uint64_t len = 0;
      if (!c_.ReadString(&t.name, &len)) {
        return Truncated("the name of tensor info " + std::to_string(k));
      }
      const std::string where = "tensor " + Quote(t.name);
      if (t.name.size() > kGgufMaxTensorNameBytes) {
        return Fail(where + ": name is " + std::to_string(t.name.size()) + " bytes, longer than " +
                    std::to_string(kGgufMaxTensorNameBytes));
      }
      if (!names.insert(t.name).second) return Fail(where + " appears twice");
      uint32_t n_dims = 0;
      if (!c_.Read(&n_dims)) return Truncated(where + ": n_dims");
      if (n_dims == 0 || n_dims > kGgufMaxDims) {
        return Fail(where + ": n_dims " + std::to_string(n_dims) + " is not in [1, 4]");
      }
      for (uint32_t d = 0; d < n_dims; ++d) {
        uint64_t ne = 0;
        if (!c_.Read(&ne)) return Truncated(where + ": dimension " + std::to_string(d));
        if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Fail(where + ": dimension " + std::to_string(d) + " is " + std::to_string(ne) +
                      ", past INT64_MAX");
        }
        t.ne.push_back(static_cast<int64_t>(ne));
      }
      uint32_t type = 0;
      if (!c_.Read(&type)) return Truncated(where + ": type");
      const TypeEntry* entry = FindType(type);
      if (entry == nullptr) {
        return Fail(where + ": ggml type " + std::to_string(type) + " is not one ggml defines");
      }
      t.type = entry->type;
      if (!c_.Read(&t.offset)) return Truncated(where + ": offset");
      Result<uint64_t> bytes = GgufTensorBytes(t.type, t.ne, t.name);
      if (!bytes.ok()) return bytes.status().WithContext(file_);
      t.bytes = *bytes;
      h.tensors.push_back(std::move(t));
    }
    // The data section starts at the next multiple of the alignment.
    const uint64_t end_of_infos = c_.pos();
    const uint64_t pad = (h.alignment - end_of_infos % h.alignment) % h.alignment;
    const uint64_t file_size = c_.pos() + c_.left();
    h.data_offset = end_of_infos + pad;
    if (!h.tensors.empty() && h.data_offset > file_size) {
      return Truncated("the data section (starting at byte " + std::to_string(h.data_offset) + ")");
    }
    const uint64_t data_bytes = h.data_offset <= file_size ? file_size - h.data_offset : 0;
    uint64_t expected = 0;
    for (const GgufTensorInfo& t : h.tensors) {
      const std::string where = "tensor " + Quote(t.name);
      if (t.offset != expected) {
        return Fail(where + " has data offset " + std::to_string(t.offset) + ", expected " +
                    std::to_string(expected) + " (tensors are stored in order, each aligned to " +
                    std::to_string(h.alignment) + " bytes)");
      }
      if (t.bytes > data_bytes || t.offset > data_bytes - t.bytes) {
        return InvalidArgumentError(
            std::string(file_) + ": " + where + " needs bytes [" + std::to_string(t.offset) + ", " +
            std::to_string(t.offset + t.bytes) + ") of the data section, which holds " +
            std::to_string(data_bytes) + " bytes; the file is truncated");
      }
      const uint64_t padded = t.bytes + (h.alignment - t.bytes % h.alignment) % h.alignment;
      expected = t.offset + padded;  // no overflow: t.offset + t.bytes <= data_bytes
    }
    return h;
  }

 private:
  Cursor c_;
  std::string_view file_;
  uint64_t array_elements_ = 0;
};

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return "?";
}

std::string_view GgmlTypeName(GgmlType type) { return Entry(type).name; }
int64_t GgmlBlockSize(GgmlType type) { return Entry(type).block; }
int64_t GgmlTypeSize(GgmlType type) { return Entry(type).size; }

Result<uint64_t> GgufTensorBytes(GgmlType type, std::span<const int64_t> ne,
                                 std::string_view name) {
  const TypeEntry& entry = Entry(type);
  const std::string where = "tensor " + Quote(name);
  if (ne.empty() || ne.size() > kGgufMaxDims) {
    return InvalidArgumentError(where + ": " + std::to_string(ne.size()) +
                                " dimensions, expected 1 to 4");
  }
  for (int64_t d : ne) {
    if (d < 0) return InvalidArgumentError(where + ": negative dimension " + std::to_string(d));
  }
  if (ne[0] % entry.block != 0) {
    return InvalidArgumentError(where + ": ne[0] = " + std::to_string(ne[0]) +
                                " is not a multiple of " + std::string(entry.name) +
                                "'s block size " + std::to_string(entry.block));
  }
  // bytes = ne0 / block * size * ne1 * ne2 * ne3 and numel, overflow-checked; a zero dimension
  // makes both 0.
  if (std::find(ne.begin(), ne.end(), 0) != ne.end()) return uint64_t{0};
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t bytes = static_cast<uint64_t>(ne[0] / entry.block) * static_cast<uint64_t>(entry.size);
  uint64_t numel = static_cast<uint64_t>(ne[0]);
  for (size_t d = 1; d < ne.size(); ++d) {
    const auto x = static_cast<uint64_t>(ne[d]);
    if (bytes > kMax / x || numel > kMax / x) {
      return InvalidArgumentError(where + ": its size overflows 63 bits");
    }
    bytes *= x;
    numel *= x;
  }
  if (bytes > kMax) return InvalidArgumentError(where + ": its size overflows 63 bits");
  return bytes;
}

Result<GgmlType> GgmlTypeFromNumber(uint32_t number) {
  const TypeEntry* e = FindType(number);
  if (e == nullptr) {
    return InvalidArgumentError("ggml type " + std::to_string(number) + " is not one ggml defines");
  }
  return e->type;
}

// ---- GgufValue ----

GgufValue GgufValue::U32(uint32_t v) {
  GgufValue x;
  x.type = GgufValueType::kU32;
  x.u = v;
  return x;
}
GgufValue GgufValue::I32(int32_t v) {
  GgufValue x;
  x.type = GgufValueType::kI32;
  x.i = v;
  return x;
}
GgufValue GgufValue::U64(uint64_t v) {
  GgufValue x;
  x.type = GgufValueType::kU64;
  x.u = v;
  return x;
}
GgufValue GgufValue::F32(float v) {
  GgufValue x;
  x.type = GgufValueType::kF32;
  x.f = v;
  return x;
}
GgufValue GgufValue::Bool(bool v) {
  GgufValue x;
  x.type = GgufValueType::kBool;
  x.b = v;
  return x;
}
GgufValue GgufValue::String(std::string v) {
  GgufValue x;
  x.type = GgufValueType::kString;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::Array(GgufValueType element_type, std::vector<GgufValue> elements) {
  GgufValue x;
  x.type = GgufValueType::kArray;
  x.array_type = element_type;
  x.array = std::move(elements);
  return x;
}

bool GgufValue::is_unsigned() const {
  return type == GgufValueType::kU8 || type == GgufValueType::kU16 || type == GgufValueType::kU32 ||
         type == GgufValueType::kU64;
}
bool GgufValue::is_signed() const {
  return type == GgufValueType::kI8 || type == GgufValueType::kI16 || type == GgufValueType::kI32 ||
         type == GgufValueType::kI64;
}

bool GgufValue::AsUint(uint64_t* out) const {
  if (is_unsigned()) {
    *out = u;
    return true;
  }
  if (is_signed() && i >= 0) {
    *out = static_cast<uint64_t>(i);
    return true;
  }
  return false;
}

bool GgufValue::AsDouble(double* out) const {
  if (is_float()) {
    *out = f;
  } else if (is_unsigned()) {
    *out = static_cast<double>(u);
  } else if (is_signed()) {
    *out = static_cast<double>(i);
  } else {
    return false;
  }
  return true;
}

std::string GgufValue::Describe() const {
  const std::string t(GgufValueTypeName(type));
  if (type == GgufValueType::kArray) {
    return "array of " + std::to_string(array.size()) + " " +
           std::string(GgufValueTypeName(array_type));
  }
  if (is_unsigned()) return t + " " + std::to_string(u);
  if (is_signed()) return t + " " + std::to_string(i);
  if (is_float()) return t + " " + std::to_string(f);
  if (type == GgufValueType::kBool) return t + (b ? " true" : " false");
  return t + " " + Quote(s);
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  if (is_unsigned()) return u == o.u;
  if (is_signed()) return i == o.i;
  if (is_float()) return f == o.f || (f != f && o.f != o.f);
  if (type == GgufValueType::kBool) return b == o.b;
  if (type == GgufValueType::kString) return s == o.s;
  return array_type == o.array_type && array == o.array;
}

// ---- tensors and header ----

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensorInfo::shape() const { return {ne.rbegin(), ne.rend()}; }

const GgufValue* GgufHeader::Find(std::string_view key) const {
  for (const GgufKeyValue& kv : metadata) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensorInfo* GgufHeader::FindTensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<GgufHeader> ParseGgufImage(std::span<const uint8_t> image, std::string_view file) {
  return Parser(image, file).Parse();
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  Result<MappedFile> map = MappedFile::Open(path);
  if (!map.ok()) return map.status().WithContext("GGUF file");
  SY_ASSIGN_OR_RETURN(GgufHeader header, ParseGgufImage(map->bytes(), path));
  return std::unique_ptr<GgufFile>(new GgufFile(std::move(map).value(), std::move(header)));
}

std::span<const uint8_t> GgufFile::Data(const GgufTensorInfo& info) const {
  return {map_.data() + header_.data_offset + info.offset, static_cast<size_t>(info.bytes)};
}

Result<const GgufTensorInfo*> GgufFile::Tensor(std::string_view name) const {
  const GgufTensorInfo* t = header_.FindTensor(name);
  if (t == nullptr) return NotFoundError(path() + ": no tensor " + Quote(name));
  return t;
}

}  // namespace sy::storage
