#include "storage/hdf5/checkpoint_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "storage/hdf5/checkpoint_layout.h"
#include "storage/hdf5/durable_replace.h"
#include "storage/hdf5/hdf5_attributes.h"
#include "storage/hdf5/hdf5_dtype.h"
#include "storage/hdf5/hdf5_id.h"
#include "storage/hdf5/hdf5_library.h"

namespace sy {

// Object time tracking is off for the root group (file creation list), every group and every
// dataset: HDF5 would otherwise stamp each object header with its creation and modification
// times, and the same checkpoint written twice would differ (tests/golden compares bytes).
struct CheckpointWriter::File {
  Hdf5Id file;
  Hdf5Id group_create;    // for the groups of '/'-separated names, created one by one
  Hdf5Id dataset_create;  // for every dataset
};

namespace {

// An I/O error in the middle of a save. The caller drops the writer, which removes the temporary
// file (Discard), so the file at the final path is the previous one, whole.
Status SaveFailed(const std::string& message) {
  return IOError(message + "; the save failed, the previous file is untouched");
}

// Creates every missing group on the way to `name` (each part but the last), with
// `group_create`. AlreadyExists when a part is a dataset: a name cannot be both a tensor and a
// group. Call with the HDF5 lock held.
Status CreateParentGroups(hid_t file, hid_t group_create, const std::string& name,
                          const std::string& where) {
  for (size_t slash = name.find('/'); slash != std::string::npos;
       slash = name.find('/', slash + 1)) {
    const std::string prefix = name.substr(0, slash);
    const htri_t exists = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    if (exists < 0) return SaveFailed(where + "looking up '" + prefix + "': " + Hdf5ErrorText());
    if (exists == 0) {
      Hdf5Id group =
          Hdf5Group(H5Gcreate2(file, prefix.c_str(), H5P_DEFAULT, group_create, H5P_DEFAULT));
      if (!group.valid()) {
        return SaveFailed(where + "creating group '" + prefix + "': " + Hdf5ErrorText());
      }
      continue;
    }
    Hdf5Id object = Hdf5Object(H5Oopen(file, prefix.c_str(), H5P_DEFAULT));
    if (!object.valid() || H5Iget_type(object.get()) != H5I_GROUP) {
      return AlreadyExistsError(where + "tensor name '" + name + "' runs through tensor '" +
                                prefix + "'; a name cannot be both a tensor and a group");
    }
  }
  return Status::Ok();
}

}  // namespace

CheckpointWriter::CheckpointWriter(std::string path, ScopedTemporary temp,
                                   std::unique_ptr<File> file,
                                   const CheckpointWriterOptions& options)
    : path_(std::move(path)),
      temp_path_(temp.path()),
      temp_(std::move(temp)),
      file_(std::move(file)),
      options_(options) {}

CheckpointWriter::~CheckpointWriter() { Discard(); }

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(
    const std::string& path, const CheckpointWriterOptions& options) {
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    return InvalidArgumentError("checkpoint " + path + ": shard " +
                                std::to_string(options.shard_index) + " of " +
                                std::to_string(options.num_shards) + " is out of range");
  }
  // Registered before it exists: a signal at any later instant removes it.
  ScopedTemporary temp(TemporaryPathFor(path));
  const std::string& temp_path = temp.path();
  // Creating the file ourselves first gives the OS's own reason when it cannot be created, and
  // never opens a file or link that is there already (HDF5 then opens the file just created).
  SY_RETURN_IF_ERROR(
      CreateNewFile(temp_path).status().WithContext("checkpoint " + path + ": temporary file"));

  Hdf5Lock lock;
  auto file = std::make_unique<File>();
  Hdf5Id access = Hdf5PropertyList(H5Pcreate(H5P_FILE_ACCESS));
  Hdf5Id create = Hdf5PropertyList(H5Pcreate(H5P_FILE_CREATE));
  file->group_create = Hdf5PropertyList(H5Pcreate(H5P_GROUP_CREATE));
  file->dataset_create = Hdf5PropertyList(H5Pcreate(H5P_DATASET_CREATE));
  // V18 format: readable by HDF5 1.8 and later (h5py, h5dump everywhere). No object times (the
  // root group's through the file creation list), so the bytes are a function of the content.
  if (!access.valid() || !ConfigureCheckpointFileAccess(access.get()) ||
      H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_V18) < 0 || !create.valid() ||
      H5Pset_obj_track_times(create.get(), false) < 0 || !file->group_create.valid() ||
      H5Pset_obj_track_times(file->group_create.get(), false) < 0 ||
      !file->dataset_create.valid() ||
      H5Pset_obj_track_times(file->dataset_create.get(), false) < 0) {
    return InternalError("checkpoint " + path + ": HDF5 file properties: " + Hdf5ErrorText());
  }
  file->file = Hdf5File(H5Fcreate(temp_path.c_str(), H5F_ACC_TRUNC, create.get(), access.get()));
  if (!file->file.valid()) {
    const std::string detail = Hdf5ErrorText();
    return IOError("checkpoint " + path + ": cannot create HDF5 file " + temp_path + ": " + detail);
  }
  return std::unique_ptr<CheckpointWriter>(
      new CheckpointWriter(path, std::move(temp), std::move(file), options));
}

Status CheckpointWriter::CheckOpen() const {
  if (file_ == nullptr) {
    return FailedPreconditionError("checkpoint " + path_ +
                                   ": the writer is finished (committed or failed); create a new "
                                   "CheckpointWriter");
  }
  return Status::Ok();
}

Status CheckpointWriter::AddTensor(std::string_view name, const Tensor& tensor) {
  if (!tensor.device().is_host()) {
    return InvalidArgumentError("checkpoint " + path_ + ": tensor '" + std::string(name) +
                                "' is on " + tensor.device().ToString() +
                                "; copy it to host memory before saving");
  }
  if (!tensor.is_contiguous()) {
    return InvalidArgumentError("checkpoint " + path_ + ": tensor '" + std::string(name) +
                                "' is not contiguous");
  }
  return AddTensor(name, tensor.dtype(), tensor.shape(), tensor.data());
}

Status CheckpointWriter::AddTensor(std::string_view name, DType dtype, const Shape& shape,
                                   const void* data) {
  SY_RETURN_IF_ERROR(CheckOpen());
  const std::string where = "checkpoint " + path_ + ": ";
  if (Status valid = ValidateTensorName(name); !valid.ok()) {
    return InvalidArgumentError(where + valid.message());
  }
  if (data == nullptr && shape.numel() > 0) {
    return InvalidArgumentError(where + "tensor '" + std::string(name) + "' has no data");
  }
  const std::string key(name);

  Hdf5Lock lock;
  const hid_t file = file_->file.get();
  // Every proper prefix must be a group (created when missing), and the name itself must be new.
  SY_RETURN_IF_ERROR(CreateParentGroups(file, file_->group_create.get(), key, where));
  if (H5Lexists(file, key.c_str(), H5P_DEFAULT) > 0) {
    return AlreadyExistsError(where + "tensor '" + key +
                              "' was already added (or names a group of other tensors)");
  }

  std::vector<hsize_t> dims(shape.dims().begin(), shape.dims().end());
  Hdf5Id space =
      Hdf5Dataspace(shape.rank() == 0 ? H5Screate(H5S_SCALAR)
                                      : H5Screate_simple(shape.rank(), dims.data(), nullptr));
  if (!space.valid()) {
    return InternalError(where + "dataspace for tensor '" + key + "': " + Hdf5ErrorText());
  }
  Hdf5Id dataset = Hdf5Dataset(H5Dcreate2(file, key.c_str(), Hdf5FileType(dtype), space.get(),
                                          H5P_DEFAULT, file_->dataset_create.get(), H5P_DEFAULT));
  if (!dataset.valid()) {
    return SaveFailed(where + "creating tensor '" + key + "': " + Hdf5ErrorText());
  }
  if (shape.numel() > 0 &&
      H5Dwrite(dataset.get(), Hdf5MemoryType(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
    return SaveFailed(where + "writing tensor '" + key + "' (" +
                      std::to_string(shape.numel() * static_cast<int64_t>(DTypeSize(dtype))) +
                      " bytes): " + Hdf5ErrorText());
  }
  if (Status status = WriteStringAttribute(dataset.get(), "dtype", DTypeName(dtype));
      !status.ok()) {
    return SaveFailed(where + "tensor '" + key + "': " + status.message());
  }
  // HDF5 may hold the data in its sieve buffer until the dataset closes: a failed write shows
  // only there, so close it now and check (a destructor would drop the error).
  if (dataset.Close() < 0) {
    return SaveFailed(where + "writing tensor '" + key + "': " + Hdf5ErrorText());
  }
  return Status::Ok();
}

Status CheckpointWriter::SetText(std::string_view key, std::string_view text) {
  SY_RETURN_IF_ERROR(CheckOpen());
  const std::string where = "checkpoint " + path_ + ": ";
  if (Status valid = ValidateMetadataKey(key); !valid.ok()) {
    return InvalidArgumentError(where + valid.message());
  }
  const std::string name = std::string(kCheckpointMetaGroup) + "/" + std::string(key);
  Hdf5Lock lock;
  const hid_t file = file_->file.get();
  if (H5Lexists(file, std::string(kCheckpointMetaGroup).c_str(), H5P_DEFAULT) > 0 &&
      H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0) {
    return AlreadyExistsError(where + "metadata '" + std::string(key) + "' was already set");
  }
  // A fixed-length string of at least one byte (HDF5 has no empty fixed strings); the "length"
  // attribute keeps the exact size, so empty text and trailing NULs survive.
  std::string padded(text);
  if (padded.empty()) padded.push_back('\0');
  Hdf5Id type = Hdf5Datatype(H5Tcopy(H5T_C_S1));
  Hdf5Id space = Hdf5Dataspace(H5Screate(H5S_SCALAR));
  if (!type.valid() || !space.valid() || H5Tset_size(type.get(), padded.size()) < 0 ||
      H5Tset_strpad(type.get(), H5T_STR_NULLPAD) < 0 ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0) {
    return InternalError(where + "string type for metadata '" + std::string(key) +
                         "': " + Hdf5ErrorText());
  }
  SY_RETURN_IF_ERROR(CreateParentGroups(file, file_->group_create.get(), name, where));
  Hdf5Id dataset = Hdf5Dataset(H5Dcreate2(file, name.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                          file_->dataset_create.get(), H5P_DEFAULT));
  if (!dataset.valid() ||
      H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()) < 0) {
    return SaveFailed(where + "writing metadata '" + std::string(key) + "': " + Hdf5ErrorText());
  }
  if (Status status =
          WriteInt64Attribute(dataset.get(), "length", static_cast<int64_t>(text.size()));
      !status.ok()) {
    return SaveFailed(where + "metadata '" + std::string(key) + "': " + status.message());
  }
  if (dataset.Close() < 0) {  // as in AddTensor: the sieve buffer's write fails here
    return SaveFailed(where + "writing metadata '" + std::string(key) + "': " + Hdf5ErrorText());
  }
  return Status::Ok();
}

Status CheckpointWriter::SetBytes(std::string_view key, std::span<const uint8_t> bytes) {
  SY_RETURN_IF_ERROR(CheckOpen());
  const std::string where = "checkpoint " + path_ + ": ";
  if (Status valid = ValidateMetadataKey(key); !valid.ok()) {
    return InvalidArgumentError(where + valid.message());
  }
  const std::string name = std::string(kCheckpointMetaGroup) + "/" + std::string(key);
  Hdf5Lock lock;
  const hid_t file = file_->file.get();
  if (H5Lexists(file, std::string(kCheckpointMetaGroup).c_str(), H5P_DEFAULT) > 0 &&
      H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0) {
    return AlreadyExistsError(where + "metadata '" + std::string(key) + "' was already set");
  }
  const hsize_t size = bytes.size();
  Hdf5Id space = Hdf5Dataspace(H5Screate_simple(1, &size, nullptr));
  SY_RETURN_IF_ERROR(CreateParentGroups(file, file_->group_create.get(), name, where));
  Hdf5Id dataset = Hdf5Dataset(H5Dcreate2(file, name.c_str(), H5T_STD_U8LE, space.get(),
                                          H5P_DEFAULT, file_->dataset_create.get(), H5P_DEFAULT));
  if (!space.valid() || !dataset.valid() ||
      (size > 0 && H5Dwrite(dataset.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                            bytes.data()) < 0) ||
      dataset.Close() < 0) {  // as in AddTensor: the sieve buffer's write fails at the close
    return SaveFailed(where + "writing metadata '" + std::string(key) + "': " + Hdf5ErrorText());
  }
  return Status::Ok();
}

Status CheckpointWriter::Commit() {
  SY_RETURN_IF_ERROR(CheckOpen());
  Status status;
  {
    Hdf5Lock lock;
    const hid_t file = file_->file.get();
    status = WriteStringAttribute(file, "format", kCheckpointFormat);
    if (status.ok()) status = WriteInt64Attribute(file, "format_version", kCheckpointFormatVersion);
    if (status.ok()) status = WriteInt64Attribute(file, "step", step_);
    if (status.ok()) status = WriteInt64Attribute(file, "shard_index", options_.shard_index);
    if (status.ok()) status = WriteInt64Attribute(file, "num_shards", options_.num_shards);
    if (status.ok() && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) {
      status = IOError("flushing " + temp_path_ + ": " + Hdf5ErrorText());
    }
    file_->group_create.Close();
    file_->dataset_create.Close();
    if (file_->file.Close() < 0 && status.ok()) {
      status = IOError("closing " + temp_path_ + ": " + Hdf5ErrorText());
    }
  }
  file_.reset();
  bool renamed = false;
  if (status.ok()) {
    status = options_.replace_existing ? DurablyReplace(temp_path_, path_, &renamed)
                                       : DurablyPlaceNew(temp_path_, path_, &renamed);
  }
  if (renamed) {
    temp_.Release();
    return status.WithContext("checkpoint " + path_);
  }
  if (!status.ok()) {
    temp_.Remove();
    return status.WithContext("checkpoint " + path_ +
                              ": commit failed, the previous file is "
                              "untouched");
  }
  return Status::Ok();
}

void CheckpointWriter::Discard() {
  if (file_ == nullptr) return;
  {
    Hdf5Lock lock;
    file_->group_create.Close();
    file_->dataset_create.Close();
    file_->file.Close();
  }
  file_.reset();
  temp_.Remove();
}

}  // namespace sy
