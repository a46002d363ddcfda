// Process-wide HDF5 library state for the checkpoint code: the lock that serialises HDF5 calls and
// the conversion of HDF5's error stack into Status messages.
//
// HDF5 prints its error stack to stderr by default. Hdf5Lock turns that off (H5Eset_auto) on
// entry, so failures reach the user once, as a Status that names the file, instead of as a stack
// dump; Hdf5ErrorText then reads the innermost message of the stack for that Status. HDF5's
// clean-up at exit is off (see hdf5_library.cc: it crashes after a failed file close).
//
// Internal to storage/hdf5 (includes <hdf5.h>).
// Thread-safety: the serial HDF5 build is not thread-safe, so every HDF5 call in Switchyard runs
// under Hdf5Mutex(); code elsewhere in the process that calls HDF5 directly must take it too.
#pragma once

#include <hdf5.h>

#include <mutex>
#include <string>

namespace sy {

std::mutex& Hdf5Mutex();

// Holds Hdf5Mutex() and keeps HDF5's automatic error printing off.
class Hdf5Lock {
 public:
  Hdf5Lock();
  Hdf5Lock(const Hdf5Lock&) = delete;
  Hdf5Lock& operator=(const Hdf5Lock&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
};

// Applies the file-access settings every checkpoint file uses: H5F_CLOSE_STRONG (closing the file
// closes every object in it, so a close really flushes everything) and, where this HDF5 has it,
// no file locking. HDF5 >= 1.10.7 flock()s files by default, which fails on file systems without
// locks (many NFS and Lustre mounts); checkpoints need no lock, since a writer only ever writes its
// private temporary file and readers only see renamed, complete files. Returns false on failure.
bool ConfigureCheckpointFileAccess(hid_t file_access);

// The outermost and the most specific message on HDF5's current error stack, on one line
// ("unable to flush file's cached information: file write failed: File too large (errno 27)"),
// or "no HDF5 error detail" when the stack is empty; with Hdf5VerboseErrors()
// (storage/hdf5/hdf5_error_detail.h), followed by the whole stack as HDF5 prints it. Clears the
// stack. Call with the lock held.
std::string Hdf5ErrorText();

}  // namespace sy
