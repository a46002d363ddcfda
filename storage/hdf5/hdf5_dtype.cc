#include "storage/hdf5/hdf5_dtype.h"

#include <string>

namespace sy {

hid_t Hdf5FileType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return H5T_IEEE_F32LE;
    case DType::kF16:
    case DType::kBF16:
      return H5T_STD_U16LE;
    case DType::kI32:
      return H5T_STD_I32LE;
    case DType::kI64:
      return H5T_STD_I64LE;
    case DType::kU8:
      return H5T_STD_U8LE;
    case DType::kI8:
      return H5T_STD_I8LE;
    case DType::kF64:
      return H5T_IEEE_F64LE;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      break;  // no HDF5 checkpoint holds quantized weights
  }
  return H5I_INVALID_HID;
}

hid_t Hdf5MemoryType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return H5T_NATIVE_FLOAT;
    case DType::kF16:
    case DType::kBF16:
      return H5T_NATIVE_UINT16;
    case DType::kI32:
      return H5T_NATIVE_INT32;
    case DType::kI64:
      return H5T_NATIVE_INT64;
    case DType::kU8:
      return H5T_NATIVE_UINT8;
    case DType::kI8:
      return H5T_NATIVE_INT8;
    case DType::kF64:
      return H5T_NATIVE_DOUBLE;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      break;
  }
  return H5I_INVALID_HID;
}

Result<DType> DTypeOfDataset(hid_t type, const std::string& dtype_attribute) {
  const H5T_class_t type_class = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  const bool is_signed = type_class == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_2;
  std::string stored;
  if (type_class == H5T_FLOAT) {
    stored = "float" + std::to_string(size * 8);
  } else if (type_class == H5T_INTEGER) {
    stored = std::string(is_signed ? "int" : "uint") + std::to_string(size * 8);
  } else {
    stored = "a non-numeric HDF5 type (class " + std::to_string(static_cast<int>(type_class)) + ")";
  }

  DType dtype;
  if (dtype_attribute.empty()) {
    if (stored == "float32") {
      dtype = DType::kF32;
    } else if (stored == "int32") {
      dtype = DType::kI32;
    } else if (stored == "int64") {
      dtype = DType::kI64;
    } else if (stored == "uint8") {
      dtype = DType::kU8;
    } else if (stored == "int8") {
      dtype = DType::kI8;
    } else {
      return InvalidArgumentError("is stored as " + stored +
                                  " with no \"dtype\" attribute, which Switchyard cannot map to a "
                                  "tensor dtype");
    }
    return dtype;
  }
  Result<DType> parsed = ParseDType(dtype_attribute);
  if (!parsed.ok()) {
    return InvalidArgumentError("has an unknown \"dtype\" attribute '" + dtype_attribute + "'");
  }
  dtype = *parsed;
  const hid_t expected = Hdf5FileType(dtype);
  const bool agrees =
      H5Tget_class(expected) == type_class && H5Tget_size(expected) == size &&
      (type_class != H5T_INTEGER || (H5Tget_sign(expected) == H5T_SGN_2) == is_signed);
  if (!agrees) {
    return InvalidArgumentError("says dtype " + dtype_attribute + " but is stored as " + stored);
  }
  return dtype;
}

}  // namespace sy
