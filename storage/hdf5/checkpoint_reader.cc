#include "storage/hdf5/checkpoint_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "runtime/config/edit_distance.h"
#include "runtime/core/regular_file.h"
#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/hdf5_attributes.h"
#include "storage/hdf5/hdf5_dtype.h"
#include "storage/hdf5/hdf5_id.h"
#include "storage/hdf5/hdf5_library.h"

namespace sy {
namespace {

constexpr std::array<unsigned char, 8> kHdf5Signature = {0x89, 'H',  'D',  'F',
                                                         '\r', '\n', 0x1a, '\n'};

// Reads the first bytes of `path` to tell "not HDF5" from "HDF5 but damaged".
Status CheckLooksLikeHdf5(const std::string& path) {
  const std::string where = "checkpoint " + path + ": ";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError(where + "file not found; check the path");
    return ErrnoError("stat checkpoint", path, err);
  }
  if (S_ISDIR(st.st_mode)) {
    return InvalidArgumentError(where + "is a directory; pass a checkpoint file");
  }
  if (!S_ISREG(st.st_mode)) {  // a FIFO would hang the open, a device the reads
    return InvalidArgumentError(where + "is " + std::string(FileKindName(st.st_mode)) +
                                ", not a regular file; pass a checkpoint file");
  }
  SY_ASSIGN_OR_RETURN(const UniqueFd fd, OpenRegularFile(path));
  std::array<unsigned char, 8> head{};
  const ssize_t n = ::read(fd.get(), head.data(), head.size());
  if (n < 0) return ErrnoError("read checkpoint", path, errno);
  if (static_cast<size_t>(n) < head.size()) {
    return DataLossError(where + "only " + std::to_string(st.st_size) +
                         " bytes, too short to be an HDF5 file; it is truncated or not a "
                         "checkpoint");
  }
  if (head == kHdf5Signature) return Status::Ok();
  // HDF5 also allows the signature after a user block (512, 1024, ... bytes in).
  Hdf5Lock lock;
  if (H5Fis_hdf5(path.c_str()) > 0) return Status::Ok();
  Hdf5ErrorText();
  return InvalidArgumentError(where +
                              "not an HDF5 file (no HDF5 signature); is this a "
                              "Switchyard checkpoint?");
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// Whether a dataset of `rank` extents `dims` and `element` bytes a value holds at most
// `file_bytes` bytes, every extent within int64 (a Shape's limit).
bool FitsInFile(const hsize_t* dims, int rank, size_t element, uint64_t file_bytes) {
  // Even a tensor with a 0 extent must have its other extents' product within int64: the
  // element count is a product taken in any order (Shape::numel), and a partial product of
  // 2^62 x 2^40 overflows before the 0 is reached.
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  bool empty = false;
  uint64_t nonzero = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0) {
      empty = true;
      continue;
    }
    if (dims[i] > kMax / nonzero) return false;
    nonzero *= dims[i];
  }
  if (empty) return true;
  uint64_t bytes = element;
  if (bytes > file_bytes) return false;
  for (int i = 0; i < rank; ++i) {
    if (bytes > file_bytes / dims[i]) return false;
    bytes *= dims[i];
  }
  return true;
}

}  // namespace

struct CheckpointReader::File {
  Hdf5Id file;
};

CheckpointReader::CheckpointReader(std::string path, std::unique_ptr<File> file)
    : path_(std::move(path)), file_(std::move(file)) {}

CheckpointReader::~CheckpointReader() {
  Hdf5Lock lock;
  file_.reset();
}

Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& path) {
  SY_RETURN_IF_ERROR(CheckLooksLikeHdf5(path));
  const std::string where = "checkpoint " + path + ": ";
  auto file = std::make_unique<File>();
  {
    Hdf5Lock lock;
    Hdf5Id access = Hdf5PropertyList(H5Pcreate(H5P_FILE_ACCESS));
    if (!access.valid() || !ConfigureCheckpointFileAccess(access.get())) {
      return InternalError(where + "HDF5 file access properties: " + Hdf5ErrorText());
    }
    file->file = Hdf5File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()));
    if (!file->file.valid()) {
      return DataLossError(where + "the HDF5 file cannot be opened; it is truncated or corrupt (" +
                           Hdf5ErrorText() + ")");
    }
  }
  std::unique_ptr<CheckpointReader> reader(new CheckpointReader(path, std::move(file)));
  SY_RETURN_IF_ERROR(reader->LoadIndex());
  return reader;
}

Status CheckpointReader::LoadIndex() {
  const std::string where = "checkpoint " + path_ + ": ";
  Hdf5Lock lock;
  const hid_t file = file_->file.get();

  Result<std::string> format = ReadStringAttribute(file, "format");
  if (!format.ok() || *format != kCheckpointFormat) {
    return InvalidArgumentError(where +
                                "an HDF5 file, but not a Switchyard checkpoint (its root "
                                "has no attribute format = \"" +
                                std::string(kCheckpointFormat) + "\")");
  }
  Result<int64_t> version = ReadInt64Attribute(file, "format_version");
  Result<int64_t> step = ReadInt64Attribute(file, "step");
  Result<int64_t> shard_index = ReadInt64Attribute(file, "shard_index");
  Result<int64_t> num_shards = ReadInt64Attribute(file, "num_shards");
  for (const auto* r : {&version, &step, &shard_index, &num_shards}) {
    if (!r->ok()) return DataLossError(where + "root " + r->status().message());
  }
  if (*version > kCheckpointFormatVersion || *version < 1) {
    return UnimplementedError(
        where + "format version " + std::to_string(*version) + ", but this build reads version " +
        std::to_string(kCheckpointFormatVersion) + "; use a newer Switchyard");
  }
  if (*num_shards < 1 || *shard_index < 0 || *shard_index >= *num_shards) {
    return DataLossError(where + "shard " + std::to_string(*shard_index) + " of " +
                         std::to_string(*num_shards) + " is out of range");
  }
  hsize_t file_bytes = 0;
  if (H5Fget_filesize(file, &file_bytes) < 0) {
    return DataLossError(where + "its size cannot be read (" + Hdf5ErrorText() + ")");
  }
  file_bytes_ = file_bytes;
  format_version_ = *version;
  step_ = *step;
  shard_index_ = static_cast<int>(*shard_index);
  num_shards_ = static_cast<int>(*num_shards);

  struct Visit {
    CheckpointReader* reader;
    Status status;
  } visit{this, Status::Ok()};
  auto callback = [](hid_t group, const char* name, const H5L_info_t* info, void* data) -> herr_t {
    auto* v = static_cast<Visit*>(data);
    const std::string where = "checkpoint " + v->reader->path_ + ": ";
    const std::string link(name);
    if (info->type != H5L_TYPE_HARD) {
      v->status = InvalidArgumentError(where + "has a soft or external link " + Quote(link) +
                                       ", which Switchyard checkpoints never contain");
      return 1;  // stop
    }
    Hdf5Id object = Hdf5Object(H5Oopen(group, name, H5P_DEFAULT));
    if (!object.valid()) {
      v->status = DataLossError(where + "cannot open " + Quote(link) + ": " + Hdf5ErrorText());
      return 1;
    }
    if (H5Iget_type(object.get()) != H5I_DATASET) return 0;  // groups hold the names' parts
    const std::string meta_prefix = std::string(kCheckpointMetaGroup) + "/";
    if (link.rfind(meta_prefix, 0) == 0) {
      const std::string key = link.substr(meta_prefix.size());
      if (key.find('/') == std::string::npos) v->reader->metadata_keys_.push_back(key);
      return 0;
    }
    CheckpointTensorInfo tensor;
    tensor.name = link;
    Result<std::string> dtype_attribute = ReadStringAttribute(object.get(), "dtype");
    if (!dtype_attribute.ok() && dtype_attribute.status().code() != StatusCode::kNotFound) {
      v->status = DataLossError(where + "tensor " + Quote(link) + ": " +
                                dtype_attribute.status().message());
      return 1;
    }
    Hdf5Id type = Hdf5Datatype(H5Dget_type(object.get()));
    Result<DType> dtype =
        DTypeOfDataset(type.get(), dtype_attribute.ok() ? *dtype_attribute : std::string());
    if (!dtype.ok()) {
      v->status =
          InvalidArgumentError(where + "tensor " + Quote(link) + " " + dtype.status().message());
      return 1;
    }
    tensor.dtype = *dtype;
    Hdf5Id space = Hdf5Dataspace(H5Dget_space(object.get()));
    const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (rank < 0 || rank > Shape::kMaxRank || H5Sget_simple_extent_type(space.get()) == H5S_NULL) {
      Hdf5ErrorText();
      v->status = InvalidArgumentError(where + "tensor " + Quote(link) + " has rank " +
                                       std::to_string(rank) + ", outside the 0.." +
                                       std::to_string(Shape::kMaxRank) + " Switchyard supports");
      return 1;
    }
    std::array<hsize_t, Shape::kMaxRank> dims{};
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    // The writer stores every dataset whole and uncompressed: a tensor cannot hold more bytes
    // than the file (nor an extent past int64), whatever its dataspace claims.
    if (!FitsInFile(dims.data(), rank, H5Tget_size(type.get()), v->reader->file_bytes_)) {
      std::string extents;
      for (int i = 0; i < rank; ++i) extents += (i ? ", " : "") + std::to_string(dims[i]);
      v->status =
          DataLossError(where + "tensor " + Quote(link) + " claims extents [" + extents +
                        "], more than the whole file holds (" +
                        std::to_string(v->reader->file_bytes_) + " bytes); the file is corrupt");
      return 1;
    }
    std::array<int64_t, Shape::kMaxRank> extents{};
    for (int i = 0; i < rank; ++i) extents[i] = static_cast<int64_t>(dims[i]);
    tensor.shape = Shape(std::span<const int64_t>(extents.data(), static_cast<size_t>(rank)));
    v->reader->tensors_.push_back(std::move(tensor));
    return 0;
  };
  if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, callback, &visit) < 0 && visit.status.ok()) {
    return DataLossError(where + "cannot list its contents; it is corrupt (" + Hdf5ErrorText() +
                         ")");
  }
  SY_RETURN_IF_ERROR(visit.status);
  std::sort(tensors_.begin(), tensors_.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::sort(metadata_keys_.begin(), metadata_keys_.end());
  return Status::Ok();
}

std::vector<std::string> CheckpointReader::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const CheckpointTensorInfo& t : tensors_) names.push_back(t.name);
  return names;
}

const CheckpointTensorInfo* CheckpointReader::FindTensor(std::string_view name) const {
  auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const CheckpointTensorInfo& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

Status CheckpointReader::NotFoundTensor(std::string_view name) const {
  std::string message = "checkpoint " + path_ + ": has no tensor " + Quote(name);
  if (auto nearest = NearestMatch(name, TensorNames())) {
    message += "; did you mean " + Quote(*nearest) + "?";
  } else {
    message += " (it holds " + std::to_string(tensors_.size()) + " tensors)";
  }
  return NotFoundError(std::move(message));
}

Status CheckpointReader::ReadTensor(std::string_view name, DType dtype, const Shape& shape,
                                    void* out) const {
  const CheckpointTensorInfo* info = FindTensor(name);
  if (info == nullptr) return NotFoundTensor(name);
  const std::string where = "checkpoint " + path_ + ": tensor " + Quote(name);
  if (info->shape != shape) {
    return InvalidArgumentError(where + " has shape " + info->shape.ToString() +
                                ", the model expects " + shape.ToString());
  }
  if (info->dtype != dtype) {
    return InvalidArgumentError(where + " has dtype " + std::string(DTypeName(info->dtype)) +
                                ", the model expects " + std::string(DTypeName(dtype)));
  }
  if (shape.numel() == 0) return Status::Ok();
  if (out == nullptr) return InvalidArgumentError(where + ": no output buffer");
  Hdf5Lock lock;
  Hdf5Id dataset = Hdf5Dataset(H5Dopen2(file_->file.get(), std::string(name).c_str(), H5P_DEFAULT));
  if (!dataset.valid() ||
      H5Dread(dataset.get(), Hdf5MemoryType(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    return DataLossError(where + " cannot be read; the file is corrupt or truncated (" +
                         Hdf5ErrorText() + ")");
  }
  return Status::Ok();
}

Status CheckpointReader::ReadTensor(std::string_view name, const Tensor& out) const {
  if (!out.device().is_host() || !out.is_contiguous()) {
    return InvalidArgumentError("checkpoint " + path_ + ": reading tensor " + Quote(name) +
                                " needs a contiguous host tensor, got " + out.ToString());
  }
  return ReadTensor(name, out.dtype(), out.shape(), out.data());
}

bool CheckpointReader::HasMetadata(std::string_view key) const {
  return std::binary_search(metadata_keys_.begin(), metadata_keys_.end(), key);
}

Result<std::vector<uint8_t>> CheckpointReader::ReadBytes(std::string_view key) const {
  const std::string where = "checkpoint " + path_ + ": metadata " + Quote(key);
  if (!HasMetadata(key)) {
    std::string message = "checkpoint " + path_ + ": has no metadata " + Quote(key) + "; it has:";
    for (size_t i = 0; i < metadata_keys_.size(); ++i) {
      message += (i == 0 ? " " : ", ") + metadata_keys_[i];
    }
    if (metadata_keys_.empty()) message += " none";
    return NotFoundError(std::move(message));
  }
  const std::string name = std::string(kCheckpointMetaGroup) + "/" + std::string(key);
  Hdf5Lock lock;
  Hdf5Id dataset = Hdf5Dataset(H5Dopen2(file_->file.get(), name.c_str(), H5P_DEFAULT));
  Hdf5Id type = Hdf5Datatype(dataset.valid() ? H5Dget_type(dataset.get()) : H5I_INVALID_HID);
  Hdf5Id space = Hdf5Dataspace(dataset.valid() ? H5Dget_space(dataset.get()) : H5I_INVALID_HID);
  if (!dataset.valid() || !type.valid() || !space.valid()) {
    return DataLossError(where + " cannot be opened (" + Hdf5ErrorText() + ")");
  }
  const H5T_class_t type_class = H5Tget_class(type.get());
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  const size_t element = H5Tget_size(type.get());
  // Stored whole and uncompressed by the writer: never more bytes than the file.
  if (points < 0 || element == 0 ||
      static_cast<uint64_t>(points) > file_bytes_ / static_cast<uint64_t>(element)) {
    Hdf5ErrorText();
    return DataLossError(where + " claims " + std::to_string(points) + " values of " +
                         std::to_string(element) + " bytes, more than the whole file holds (" +
                         std::to_string(file_bytes_) + " bytes); the file is corrupt");
  }
  if (type_class == H5T_STRING && !H5Tis_variable_str(type.get()) && points == 1) {
    std::vector<uint8_t> bytes(H5Tget_size(type.get()));
    if (H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0) {
      return DataLossError(where + " cannot be read (" + Hdf5ErrorText() + ")");
    }
    Result<int64_t> length = ReadInt64Attribute(dataset.get(), "length");
    if (length.ok() && *length >= 0 && static_cast<size_t>(*length) <= bytes.size()) {
      bytes.resize(static_cast<size_t>(*length));
    } else {
      while (!bytes.empty() && bytes.back() == 0) bytes.pop_back();
    }
    return bytes;
  }
  if (type_class == H5T_INTEGER && H5Tget_size(type.get()) == 1 &&
      H5Sget_simple_extent_ndims(space.get()) == 1) {
    std::vector<uint8_t> bytes(static_cast<size_t>(points));
    if (!bytes.empty() &&
        H5Dread(dataset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0) {
      return DataLossError(where + " cannot be read (" + Hdf5ErrorText() + ")");
    }
    return bytes;
  }
  Hdf5ErrorText();
  return InvalidArgumentError(where + " is neither a fixed-length string nor a 1-D byte array");
}

Result<std::string> CheckpointReader::ReadText(std::string_view key) const {
  SY_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadBytes(key));
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace sy
