#include "storage/hdf5/hdf5_attributes.h"

#include <vector>

#include "storage/hdf5/hdf5_id.h"
#include "storage/hdf5/hdf5_library.h"

namespace sy {
namespace {

Result<Hdf5Id> OpenAttribute(hid_t object, const char* name) {
  const htri_t exists = H5Aexists(object, name);
  if (exists < 0) {
    return InvalidArgumentError(std::string("attribute '") + name + "': " + Hdf5ErrorText());
  }
  if (exists == 0) return NotFoundError(std::string("no attribute '") + name + "'");
  Hdf5Id attribute = Hdf5Attribute(H5Aopen(object, name, H5P_DEFAULT));
  if (!attribute.valid()) {
    return InvalidArgumentError(std::string("attribute '") + name + "': " + Hdf5ErrorText());
  }
  return attribute;
}

}  // namespace

Status WriteStringAttribute(hid_t object, const char* name, std::string_view value) {
  const std::string text = value.empty() ? std::string(1, '\0') : std::string(value);
  Hdf5Id type = Hdf5Datatype(H5Tcopy(H5T_C_S1));
  Hdf5Id space = Hdf5Dataspace(H5Screate(H5S_SCALAR));
  if (!type.valid() || !space.valid() || H5Tset_size(type.get(), text.size()) < 0 ||
      H5Tset_strpad(type.get(), H5T_STR_NULLPAD) < 0) {
    return InternalError(std::string("attribute '") + name + "' type: " + Hdf5ErrorText());
  }
  Hdf5Id attribute =
      Hdf5Attribute(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!attribute.valid() || H5Awrite(attribute.get(), type.get(), text.data()) < 0) {
    return IOError(std::string("writing attribute '") + name + "': " + Hdf5ErrorText());
  }
  return Status::Ok();
}

Status WriteInt64Attribute(hid_t object, const char* name, int64_t value) {
  Hdf5Id space = Hdf5Dataspace(H5Screate(H5S_SCALAR));
  Hdf5Id attribute =
      Hdf5Attribute(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!space.valid() || !attribute.valid() ||
      H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value) < 0) {
    return IOError(std::string("writing attribute '") + name + "': " + Hdf5ErrorText());
  }
  return Status::Ok();
}

Result<std::string> ReadStringAttribute(hid_t object, const char* name) {
  SY_ASSIGN_OR_RETURN(Hdf5Id attribute, OpenAttribute(object, name));
  Hdf5Id type = Hdf5Datatype(H5Aget_type(attribute.get()));
  Hdf5Id space = Hdf5Dataspace(H5Aget_space(attribute.get()));
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) ||
      !space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1) {
    Hdf5ErrorText();  // clears the stack
    return InvalidArgumentError(std::string("attribute '") + name +
                                "' is not a fixed-length string");
  }
  const size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(size);
  if (H5Aread(attribute.get(), type.get(), buffer.data()) < 0) {
    return DataLossError(std::string("reading attribute '") + name + "': " + Hdf5ErrorText());
  }
  std::string value(buffer.begin(), buffer.end());
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

Result<int64_t> ReadInt64Attribute(hid_t object, const char* name) {
  SY_ASSIGN_OR_RETURN(Hdf5Id attribute, OpenAttribute(object, name));
  Hdf5Id type = Hdf5Datatype(H5Aget_type(attribute.get()));
  Hdf5Id space = Hdf5Dataspace(H5Aget_space(attribute.get()));
  if (!type.valid() || H5Tget_class(type.get()) != H5T_INTEGER || !space.valid() ||
      H5Sget_simple_extent_npoints(space.get()) != 1) {
    Hdf5ErrorText();
    return InvalidArgumentError(std::string("attribute '") + name + "' is not an integer");
  }
  int64_t value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) < 0) {
    return DataLossError(std::string("reading attribute '") + name + "': " + Hdf5ErrorText());
  }
  return value;
}

}  // namespace sy
