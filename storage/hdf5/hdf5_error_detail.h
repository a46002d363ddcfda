// How much of HDF5's own error report a checkpoint error carries.
//
// By default, one line for people: what failed and the operating system's reason
// ("file write failed: File too large (errno 27)"). HDF5's file drivers also report every argument
// of the failing call (time, file descriptor, buffer address, "bytes actually written =
// 18446744073709551615", ...); with verbose errors on (`switchyard train --verbose`) a checkpoint
// error carries HDF5's whole error stack instead, every frame with its function, file and line.
//
// Thread-safety: a process-wide setting; set it once at start-up, read from any thread.
#pragma once

namespace sy {

// Default: false.
void SetHdf5VerboseErrors(bool verbose);
bool Hdf5VerboseErrors();

}  // namespace sy
