// How each DType is stored in an HDF5 checkpoint: the file datatype, the in-memory datatype, and
// the check that a dataset's HDF5 type agrees with its "dtype" attribute.
//
// bf16 and f16 are stored as uint16 bit patterns (HDF5 has no bfloat16, and storing f16 as bits
// keeps the two alike); the "dtype" attribute says which.
//
// Internal to storage/hdf5 (includes <hdf5.h>). Thread-safety: call with Hdf5Mutex() held.
#pragma once

#include <hdf5.h>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

namespace sy {

// Little-endian file types: H5T_IEEE_F32LE, H5T_STD_U16LE, H5T_STD_I32LE, ...
hid_t Hdf5FileType(DType dtype);
// The native type of the same size and class, for H5Dread/H5Dwrite.
hid_t Hdf5MemoryType(DType dtype);

// The dtype a dataset with HDF5 type `type` holds, given its "dtype" attribute (empty when
// absent: then only types with one obvious meaning, like float32 or int64, are accepted).
// InvalidArgument (the message says what disagrees) when the two are inconsistent.
Result<DType> DTypeOfDataset(hid_t type, const std::string& dtype_attribute);

}  // namespace sy
