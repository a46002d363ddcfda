// Scalar attributes on HDF5 objects: fixed-length strings and int64 values, as the checkpoint
// layout uses them (format, format_version, step, dtype, length).
//
// Internal to storage/hdf5 (includes <hdf5.h>). Thread-safety: call with Hdf5Mutex() held.
// Errors carry HDF5's message but not the file name; callers add it.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

Status WriteStringAttribute(hid_t object, const char* name, std::string_view value);
Status WriteInt64Attribute(hid_t object, const char* name, int64_t value);

// NotFound when the attribute is absent; InvalidArgument when it has another type.
Result<std::string> ReadStringAttribute(hid_t object, const char* name);
Result<int64_t> ReadInt64Attribute(hid_t object, const char* name);

}  // namespace sy
