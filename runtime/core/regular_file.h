// OpenRegularFile: the one way Switchyard opens a file it reads, so that nothing blocks on what is
// not a regular file.
//
// A FIFO, a terminal or another device planted where a model, checkpoint, config or store should
// be would make a plain open() or read() wait forever (an open of a FIFO blocks until a writer
// comes). The file is opened with O_NONBLOCK, checked with fstat to be a regular file, and only
// then switched back to blocking reads. Every reader goes through here: ReadFile, MappedFile, the
// store's file systems, the checkpoint and GGUF readers, the tokenizer; a library that can only
// open by name (HDF5, sentencepiece) is preceded by CheckRegularFile.
//
// Errors name the path and what is there instead:
//   NotFound         "<path> does not exist", or "<path> is a dangling symbolic link (to T)"
//   InvalidArgument  "<path> is a FIFO (named pipe), not a regular file" (or a directory, a
//                    character device, a block device, a socket)
//   IOError          naming the call that failed and the errno text
//
// Ownership: the returned UniqueFd owns the descriptor. Thread-safety: plain system calls.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <string>
#include <string_view>

#include "runtime/core/status.h"
#include "runtime/core/unique_fd.h"

namespace sy {

// Opens `path` with `flags` (O_RDONLY by default; O_RDWR, and O_NOFOLLOW to refuse a symbolic
// link, may be given) | O_CLOEXEC, and checks that it is a regular file before anything can
// block on it. With O_NOFOLLOW a link there is FailedPrecondition "<path> is a symbolic link (to
// T); refusing to follow it: remove it or choose another path".
Result<UniqueFd> OpenRegularFile(const std::string& path, int flags = O_RDONLY);

// The check and the switch to blocking I/O, for a descriptor `fd` of `path` opened elsewhere with
// O_NONBLOCK (a file created when missing: storage/fs/file_descriptors.h).
Status RequireRegularFile(int fd, const std::string& path);

// For a library that opens `path` by name itself: the same check, with the descriptor closed
// again. (The name is checked, not the library's own open; it keeps a FIFO or device from hanging
// it, which is what it is for.)
Status CheckRegularFile(const std::string& path);

// The refusal above, for `path` (a symbolic link).
Status SymbolicLinkRefusal(const std::string& path);

// "a FIFO (named pipe)", "a directory", "a character device", ... for a stat mode.
std::string_view FileKindName(mode_t mode);

}  // namespace sy
