#include "storage/formats/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <utility>

#include "runtime/core/temporary_cleanup.h"
#include "storage/formats/text_file.h"
#include "storage/hdf5/durable_replace.h"

namespace sy::storage {
namespace {

// Appends little-endian scalars and strings to a buffer (the header is built in memory).
class Bytes {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void PutScalar(const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::kU8:
        Put(static_cast<uint8_t>(v.u));
        break;
      case GgufValueType::kI8:
        Put(static_cast<int8_t>(v.i));
        break;
      case GgufValueType::kU16:
        Put(static_cast<uint16_t>(v.u));
        break;
      case GgufValueType::kI16:
        Put(static_cast<int16_t>(v.i));
        break;
      case GgufValueType::kU32:
        Put(static_cast<uint32_t>(v.u));
        break;
      case GgufValueType::kI32:
        Put(static_cast<int32_t>(v.i));
        break;
      case GgufValueType::kU64:
        Put(v.u);
        break;
      case GgufValueType::kI64:
        Put(v.i);
        break;
      case GgufValueType::kF32:
        Put(static_cast<float>(v.f));
        break;
      case GgufValueType::kF64:
        Put(v.f);
        break;
      case GgufValueType::kBool:
        Put(static_cast<uint8_t>(v.b ? 1 : 0));
        break;
      case GgufValueType::kString:
        PutString(v.s);
        break;
      case GgufValueType::kArray:
        break;  // refused by CheckValue
    }
  }
  void PutValue(const GgufValue& v) {
    Put(static_cast<uint32_t>(v.type));
    if (v.type != GgufValueType::kArray) {
      PutScalar(v);
      return;
    }
    Put(static_cast<uint32_t>(v.array_type));
    Put<uint64_t>(v.array.size());
    for (const GgufValue& e : v.array) PutScalar(e);
  }
  void Pad(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }
  const std::vector<uint8_t>& bytes() const { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// The value fits its type's width, and an array's elements are scalars of its element type.
Status CheckValue(const GgufKeyValue& kv) {
  const std::string where = "metadata key " + Quote(kv.key);
  auto fits = [&](const GgufValue& v) {
    switch (v.type) {
      case GgufValueType::kU8:
        return v.u <= 0xff;
      case GgufValueType::kU16:
        return v.u <= 0xffff;
      case GgufValueType::kU32:
        return v.u <= 0xffffffffu;
      case GgufValueType::kI8:
        return v.i >= -128 && v.i <= 127;
      case GgufValueType::kI16:
        return v.i >= -32768 && v.i <= 32767;
      case GgufValueType::kI32:
        return v.i >= INT32_MIN && v.i <= INT32_MAX;
      case GgufValueType::kU64:
      case GgufValueType::kI64:
      case GgufValueType::kF32:
      case GgufValueType::kF64:
      case GgufValueType::kBool:
      case GgufValueType::kString:
      case GgufValueType::kArray:
        return true;
    }
    return false;
  };
  if (kv.value.type != GgufValueType::kArray) {
    if (!fits(kv.value))
      return InvalidArgumentError(where + ": " + kv.value.Describe() + " does not fit its type");
    return Status::Ok();
  }
  if (kv.value.array_type == GgufValueType::kArray) {
    return InvalidArgumentError(where + ": nested arrays are not supported");
  }
  for (const GgufValue& e : kv.value.array) {
    if (e.type != kv.value.array_type || !fits(e)) {
      return InvalidArgumentError(where + ": element " + e.Describe() + " in an array of " +
                                  std::string(GgufValueTypeName(kv.value.array_type)));
    }
  }
  return Status::Ok();
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

Status WriteGguf(const std::string& path, std::span<const GgufKeyValue> metadata,
                 std::span<const GgufTensorToWrite> tensors, bool replace_existing) {
  uint32_t alignment = kGgufDefaultAlignment;
  std::set<std::string> keys;
  for (const GgufKeyValue& kv : metadata) {
    if (!keys.insert(kv.key).second) {
      return InvalidArgumentError(path + ": metadata key " + Quote(kv.key) + " appears twice");
    }
    SY_RETURN_IF_ERROR(CheckValue(kv));
    if (kv.key == "general.alignment") {
      if (kv.value.type != GgufValueType::kU32 || kv.value.u == 0 ||
          (kv.value.u & (kv.value.u - 1)) != 0) {
        return InvalidArgumentError(path + ": general.alignment is " + kv.value.Describe() +
                                    ", expected a u32 power of two");
      }
      alignment = static_cast<uint32_t>(kv.value.u);
    }
  }
  Bytes header;
  header.Put(kGgufMagic);
  header.Put(kGgufVersion);
  header.Put<uint64_t>(tensors.size());
  header.Put<uint64_t>(metadata.size());
  for (const GgufKeyValue& kv : metadata) {
    header.PutString(kv.key);
    header.PutValue(kv.value);
  }
  std::set<std::string> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const GgufTensorToWrite& t : tensors) {
    const std::string where = path + ": tensor " + Quote(t.name);
    if (t.name.size() > kGgufMaxTensorNameBytes) {
      return InvalidArgumentError(where + ": the name is longer than 63 bytes");
    }
    if (!names.insert(t.name).second) return InvalidArgumentError(where + " appears twice");
    Result<uint64_t> bytes = GgufTensorBytes(t.type, t.ne, t.name);
    if (!bytes.ok()) return bytes.status().WithContext(path);
    if (!t.fill && t.data.size() != *bytes) {
      return InvalidArgumentError(where + ": " + std::to_string(t.data.size()) +
                                  " bytes of data, its type and shape need " +
                                  std::to_string(*bytes));
    }
    header.PutString(t.name);
    header.Put(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) header.Put(static_cast<uint64_t>(d));
    header.Put(static_cast<uint32_t>(t.type));
    header.Put(offset);
    sizes.push_back(*bytes);
    offset += *bytes + (alignment - *bytes % alignment) % alignment;
  }
  header.Pad(alignment);

  ScopedTemporary staged(TemporaryPathFor(path));
  const std::string& temp = staged.path();
  // "x": O_EXCL, which never opens a file or a symbolic link that is there already.
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(temp.c_str(), "wbx"));
  if (!f) return CreationError("create", temp, errno);
  auto write = [&](const void* p, size_t n) -> Status {
    if (n > 0 && std::fwrite(p, 1, n, f.get()) != n) return ErrnoError("cannot write", temp, errno);
    return Status::Ok();
  };
  auto fail = [&](Status s) {
    f.reset();
    return s;
  };
  if (Status s = write(header.bytes().data(), header.bytes().size()); !s.ok()) return fail(s);
  const std::vector<uint8_t> zeros(alignment, 0);
  std::vector<uint8_t> buffer;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const GgufTensorToWrite& t = tensors[k];
    std::span<const uint8_t> data = t.data;
    if (t.fill) {
      buffer.assign(static_cast<size_t>(sizes[k]), 0);
      if (Status s = t.fill(buffer); !s.ok()) {
        return fail(s.WithContext(path + ": tensor " + Quote(t.name)));
      }
      data = buffer;
    }
    if (Status s = write(data.data(), data.size()); !s.ok()) return fail(s);
    const size_t pad = static_cast<size_t>((alignment - sizes[k] % alignment) % alignment);
    if (Status s = write(zeros.data(), pad); !s.ok()) return fail(s);
  }
  if (std::fflush(f.get()) != 0) return fail(ErrnoError("cannot write", temp, errno));
  if (std::fclose(f.release()) != 0) return ErrnoError("cannot close", temp, errno);
  bool renamed = false;
  const Status placed = replace_existing ? DurablyReplace(temp, path, &renamed)
                                         : DurablyPlaceNew(temp, path, &renamed);
  if (renamed) staged.Release();
  return placed;
}

}  // namespace sy::storage
