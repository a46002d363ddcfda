// libFuzzer target for what storage/hdf5/checkpoint_reader.cc makes of an HDF5 checkpoint's
// contents: the root attributes (format, format_version, step, shard_index, num_shards), every
// dataset's type, "dtype" attribute, rank and extents (the tensor index and its shape checks), and
// the metadata under meta/ (fixed-length strings with their "length" attribute, byte arrays). The
// input describes a file as records (below); the fuzzer writes it with HDF5 itself, so HDF5's own
// on-disk parser is not what is fuzzed here (it is HDF5's), only what Switchyard reads out of a
// well-formed HDF5 file that a corrupt or hostile writer filled. Then the real reader opens it,
// reads every tensor whose size is small enough into a buffer of exactly its size, asks for it
// under a wrong shape and a wrong name, and reads every metadata key as bytes and as text. Any
// input must give OK or an error Status; never a crash, an abort, a hang or an allocation that
// only the file's claims ask for. Every tensor name also goes through the sharded layout's name
// parsers (ExpertOfTensorName, ParseCheckpointShardFileName).
//
// Records, repeated to the end of the input (every field is cut short where the input ends):
//   kind u8 % 6
//   0 root string attribute:  name str8, value str16
//   1 root int64 attribute:   name str8, value i64 (little-endian)
//   2 tensor dataset:         path str8, type u8 (kTypes), rank u8 % 8, dims u64 each,
//                             dtype attribute str8 (empty: none); data from the input, zero-filled
//                             (late-allocated, unwritten chunks when over kMaxWrittenBytes)
//   3 metadata string:        key str8, value str16, length attribute i64 when a flag byte is odd
//   4 metadata byte array:    key str8, bytes str16
//   5 metadata byte array, declared but never written: key str8, size u64
// str8 / str16: a u8 / u16 length, then that many bytes.
// corpus/ holds real checkpoints (a trained one, tests/golden's, one converted from Hugging Face)
// in this encoding, and malformed variants (make_corpus.py).
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/checkpoint_reader.h"
#include "storage/hdf5/hdf5_attributes.h"

namespace {

constexpr size_t kMaxWrittenBytes = 1 << 16;  // larger datasets get unwritten chunks
constexpr size_t kMaxReadBytes = 1 << 20;     // tensors read back up to this size

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint64_t Int(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && pos_ < size_; ++i) v |= uint64_t{data_[pos_++]} << (8 * i);
    return v;
  }
  std::string Bytes(size_t n) {
    n = std::min(n, size_ - std::min(pos_, size_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string Str8() { return Bytes(Int(1)); }
  std::string Str16() { return Bytes(Int(2)); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Dataset types a writer might use; index u8 % size.
hid_t FileType(uint64_t i) {
  const hid_t types[] = {H5T_IEEE_F32LE, H5T_IEEE_F64LE, H5T_STD_I8LE,   H5T_STD_I16LE,
                         H5T_STD_I32LE,  H5T_STD_I64LE,  H5T_STD_U8LE,   H5T_STD_U16LE,
                         H5T_STD_U32LE,  H5T_STD_U64LE,  H5T_IEEE_F32BE, H5T_STD_I64BE};
  return types[i % (sizeof(types) / sizeof(types[0]))];
}

// Creation of intermediate groups, for paths like "params/layers/0/w".
hid_t LinkCreate() {
  static const hid_t lcpl = [] {
    hid_t p = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(p, 1);
    return p;
  }();
  return lcpl;
}

// A dataset of `type` and extents `dims`; written from `bytes` (zero-filled) when small enough,
// else chunked and never written (HDF5 allocates nothing; reads return zeros).
hid_t MakeDataset(hid_t file, const std::string& path, hid_t type, const std::vector<hsize_t>& dims,
                  const std::string& bytes) {
  if (path.empty()) return -1;
  hid_t space = dims.empty()
                    ? H5Screate(H5S_SCALAR)
                    : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  if (space < 0) return -1;
  const hssize_t points = H5Sget_simple_extent_npoints(space);
  const size_t element = H5Tget_size(type);
  const bool small = points >= 0 && static_cast<uint64_t>(points) <= kMaxWrittenBytes / element;
  hid_t create = H5Pcreate(H5P_DATASET_CREATE);
  if (!small && !dims.empty()) {
    std::vector<hsize_t> chunk(dims.size(), 1);
    H5Pset_chunk(create, static_cast<int>(chunk.size()), chunk.data());
    H5Pset_alloc_time(create, H5D_ALLOC_TIME_INCR);
  }
  hid_t dataset = H5Dcreate2(file, path.c_str(), type, space, LinkCreate(), create, H5P_DEFAULT);
  if (dataset >= 0 && small && points > 0) {
    std::string data = bytes;
    data.resize(static_cast<size_t>(points) * element, '\0');
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
  }
  H5Pclose(create);
  H5Sclose(space);
  return dataset;
}

// Attributes go through the writer's own calls (storage/hdf5/hdf5_attributes.h); one HDF5 refuses
// (an empty or duplicate name) is simply left out, as is a dataset it refuses.
void Build(hid_t file, Input& in) {
  while (!in.empty()) {
    switch (in.Int(1) % 6) {
      case 0: {
        const std::string name = in.Str8();
        (void)sy::WriteStringAttribute(file, name.c_str(), in.Str16());
        break;
      }
      case 1: {
        const std::string name = in.Str8();
        (void)sy::WriteInt64Attribute(file, name.c_str(), static_cast<int64_t>(in.Int(8)));
        break;
      }
      case 2: {
        const std::string path = in.Str8();
        const hid_t type = FileType(in.Int(1));
        std::vector<hsize_t> dims(in.Int(1) % 8);
        for (hsize_t& d : dims) d = in.Int(8);
        const std::string dtype = in.Str8();
        const std::string bytes = in.Str16();
        hid_t dataset = MakeDataset(file, path, type, dims, bytes);
        if (dataset >= 0) {
          if (!dtype.empty()) (void)sy::WriteStringAttribute(dataset, "dtype", dtype);
          H5Dclose(dataset);
        }
        break;
      }
      case 3: {
        const std::string key = "meta/" + in.Str8();
        const std::string value = in.Str16();
        const bool with_length = in.Int(1) % 2 == 1;
        const int64_t length = static_cast<int64_t>(in.Int(8));
        hid_t type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, std::max<size_t>(value.size(), 1));
        H5Tset_strpad(type, H5T_STR_NULLPAD);
        hid_t dataset = MakeDataset(file, key, type, {}, value);
        if (dataset >= 0) {
          if (with_length) (void)sy::WriteInt64Attribute(dataset, "length", length);
          H5Dclose(dataset);
        }
        H5Tclose(type);
        break;
      }
      case 4: {
        const std::string key = "meta/" + in.Str8();
        const std::string bytes = in.Str16();
        hid_t dataset = MakeDataset(file, key, H5T_STD_U8LE, {bytes.size()}, bytes);
        if (dataset >= 0) H5Dclose(dataset);
        break;
      }
      case 5: {
        const std::string key = "meta/" + in.Str8();
        hid_t dataset = MakeDataset(file, key, H5T_STD_U8LE, {in.Int(8)}, "");
        if (dataset >= 0) H5Dclose(dataset);
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the fuzzer's own writes may fail quietly
    // Memory-backed where there is /dev/shm: every input is a file written and read back.
    const char* dir = std::getenv("TMPDIR");
    if (dir == nullptr) dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/sy_checkpoint_metadata_fuzzer." + std::to_string(::getpid()) +
           ".h5";
  }();
  {
    hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) __builtin_trap();
    Input in(data, size);
    Build(file, in);
    H5Fclose(file);
  }
  sy::Result<std::unique_ptr<sy::CheckpointReader>> reader = sy::CheckpointReader::Open(path);
  if (reader.ok()) {
    const sy::CheckpointReader& r = **reader;
    for (const sy::CheckpointTensorInfo& t : r.tensors()) {
      if (r.FindTensor(t.name) != &t) __builtin_trap();
      // The names' parsers of the sharded layout (convert --ep-size, checkpoint_set.cc) on
      // untrusted names: an expert id is -1 or one the name spells; a shard name parses to a
      // valid index and count or not at all.
      if (sy::ExpertOfTensorName(t.name) < -1) __builtin_trap();
      int index = -1, count = -1;
      if (sy::ParseCheckpointShardFileName(t.name, &index, &count) &&
          (index < 0 || count < 1 || index >= count)) {
        __builtin_trap();
      }
      const int64_t numel = t.shape.numel();
      const size_t element = sy::DTypeSize(t.dtype);
      if (numel >= 0 && static_cast<uint64_t>(numel) <= kMaxReadBytes / element) {
        std::vector<uint8_t> out(static_cast<size_t>(numel) * element);
        (void)r.ReadTensor(t.name, t.dtype, t.shape, out.data());
      }
      // A wrong shape must be refused before anything is read (out is never touched).
      if (r.ReadTensor(t.name, t.dtype, sy::Shape{numel + 1}, nullptr).ok()) __builtin_trap();
    }
    if (r.ReadTensor("no/such/tensor", sy::DType::kF32, sy::Shape{1}, nullptr).ok()) {
      __builtin_trap();
    }
    for (const std::string& key : r.MetadataKeys()) {
      (void)r.ReadBytes(key);
      (void)r.ReadText(key);
    }
    (void)r.ReadText("no_such_key");
  }
  std::remove(path.c_str());
  return 0;
}
