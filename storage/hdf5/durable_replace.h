// DurablyReplace: the commit step of an atomic file write.
//
//   write everything to TemporaryPathFor(path)  ->  DurablyReplace(tmp, path)
//                                               or  DurablyPlaceNew(tmp, path)
//
// fsyncs the temporary file, renames it over the target (atomic on POSIX file systems) and fsyncs
// the target's directory so the rename itself survives a power cut. Until the rename, readers of
// `path` see the previous file, complete; after it, the new one, complete. A crash at any point
// leaves one or the other, plus possibly a stale temporary file. DurablyPlaceNew is the same for
// a `path` that must not exist: it never replaces a file that appeared there meanwhile.
//
// Thread-safety: plain system calls; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/file_creation.h"
#include "runtime/core/status.h"

namespace sy {

// IOError naming the file and the failing call.
Status FsyncFile(const std::string& path);
Status FsyncParentDirectory(const std::string& path);
// `renamed` (optional) tells whether the rename happened: then a failure (of the directory's
// fsync) leaves the new file, complete, under `final_path`, and the previous one is gone.
Status DurablyReplace(const std::string& temp_path, const std::string& final_path,
                      bool* renamed = nullptr);
// As DurablyReplace, but AlreadyExists "<final_path> exists" (and the temporary left in place for
// the caller to remove) when something is at `final_path` already, or appears there meanwhile.
Status DurablyPlaceNew(const std::string& temp_path, const std::string& final_path,
                       bool* renamed = nullptr);
// The last step of DurablyReplace, for a caller that renamed `final_path` into place itself (a
// directory): fsyncs its parent; a failure says that the file is complete but the rename may not
// survive a power cut.
Status FsyncParentDirectoryAfterRename(const std::string& final_path);

// Removes the files TemporaryPathFor made ("<name>.tmp.<pid>.<hex>", runtime/core/file_creation.h)
// in `dir` (not below it) whose process `pid` is gone from this machine (kill(pid, 0) fails with
// ESRCH): what a writer killed mid-save leaves behind. A file whose process still runs, even if
// that process is not the writer (a reused pid), is kept. Returns the paths removed; IOError naming
// the directory or file when listing or removing fails. Call it only where no writer on another
// machine can stage into `dir` (checkpoint.dir is locked by one run:
// launcher/training/directory_lock.h).
Result<std::vector<std::string>> RemoveStaleTemporaryFiles(const std::string& dir);

// Removes what a writer of `final_path` killed mid-write left next to it: TemporaryPathFor's names
// (a file, or a staging directory with all it holds) of every `pid` gone from this machine, as
// above. Returns the paths removed (none when the directory does not exist); IOError naming the
// path when removing fails.
Result<std::vector<std::string>> RemoveStaleTemporariesOf(const std::string& final_path);

}  // namespace sy
