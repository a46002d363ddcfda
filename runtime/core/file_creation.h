// File creation: the one way Switchyard creates a file or directory, so that a link or a file
// planted by another user is never followed, truncated or replaced.
//
//   - Temporaries (TemporaryPathFor) have unpredictable names in the destination's directory,
//     "<path>.tmp.<pid>.<16 hex digits>", so nobody can plant anything there in advance; the pid
//     lets a later run remove what a killed one left (storage/hdf5/durable_replace.h).
//   - CreateNewFile and CreateNewDirectory never open what exists: O_CREAT|O_EXCL (which refuses
//     a symbolic link, dangling or not) and O_NOFOLLOW; mkdir.
//   - OpenNoFollow opens a file that may exist (a lock file) without following a symbolic link in
//     its last component; OpenForAppend opens a log that way.
//   - RenameNoReplace puts a finished temporary in place without replacing anything that appeared
//     there meanwhile (renameat2 RENAME_NOREPLACE; link + unlink for a file where the file system
//     lacks it).
//   - WriteFileReplacing writes a whole output file (a JSON report, a chart) through a temporary
//     renamed over the target: a symbolic link there is replaced, never written through.
//
// Errors name the path:
//   AlreadyExists       "<path> exists"
//   FailedPrecondition  "<path> is a symbolic link (to <target>); refusing to follow it: remove it
//                       or choose another path"
//   IOError             naming the call that failed and the errno text
//
// Ownership: descriptors are returned as UniqueFd. Thread-safety: plain system calls; the random
// names come from getrandom, so any thread may call any function.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "runtime/core/status.h"
#include "runtime/core/unique_fd.h"

namespace sy {

// "<path>.tmp.<pid>.<16 hex digits>": where this process stages `path`; a new name on each call.
std::string TemporaryPathFor(const std::string& path);

// The pid in a file name TemporaryPathFor made ("x.tmp.1234.0123456789abcdef", or the older
// "x.tmp.1234"), or -1 when `name` is not one.
pid_t TemporaryPathOwner(std::string_view name);

// Creates `path`, which must not exist (not even as a dangling symbolic link), for writing
// (O_WRONLY, or O_RDWR when `read_write`) with `mode`, O_CLOEXEC.
Result<UniqueFd> CreateNewFile(const std::string& path, mode_t mode = 0644,
                               bool read_write = false);

// Creates the directory `path`, which must not exist.
Status CreateNewDirectory(const std::string& path, mode_t mode = 0755);

// open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode): a symbolic link there is refused with the
// error above instead of being followed.
Result<UniqueFd> OpenNoFollow(const std::string& path, int flags, mode_t mode = 0644);

// Opens `path` for appending (a log), created when missing: never through a symbolic link, and
// only a regular file (a FIFO there fails at once instead of blocking).
Result<UniqueFd> OpenForAppend(const std::string& path);

// Writes all of `bytes` to `fd` (at its offset, or appended with O_APPEND); IOError naming `path`.
Status WriteAll(int fd, const std::string& path, std::string_view bytes);

// Renames `from` (a file or a directory) to `to`, which must not exist: AlreadyExists "<to>
// exists" when it does, whatever appeared there and whenever.
Status RenameNoReplace(const std::string& from, const std::string& to);

// Writes `bytes` to a new temporary beside `path` and renames it over `path` (replacing a file,
// or a symbolic link, there). Readers see the old file or the new one, complete.
Status WriteFileReplacing(const std::string& path, std::string_view bytes);

// The error for a creation or open of `path` that failed with `err` (EEXIST, ELOOP: the messages
// above; otherwise ErrnoError(op, path, err)).
Status CreationError(std::string_view op, const std::string& path, int err);

}  // namespace sy
