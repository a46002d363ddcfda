// I/O tuning sweep (`switchyard tune-io`): measures io_uring read and write throughput for every
// block size x queue depth on a file in the given directory, in the manner of DeepSpeed's
// ds_nvme_tune, and reports the best setting for each.
//
// Each point moves `bytes_per_point` bytes sequentially through a UringFileSystem built with
// that block size and queue depth (O_DIRECT): writes first (then fdatasync, counted), then reads.
// The scratch file (a new name each run, "<dir>/switchyard-tune-io.dat.tmp.<pid>.<hex>") is removed
// at the end, after a failure and on SIGINT/SIGTERM too, unless keep_file (then kept_file names
// it).
//
// Thread-safety: RunIoTune may run concurrently with itself on different directories.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "storage/fs/file_system.h"

namespace sy::storage {

struct TuneOptions {
  std::string dir;  // Required: a directory on the device to tune.
  // Size of the scratch file. Default: 512 MiB.
  uint64_t file_bytes = uint64_t{512} << 20;
  // Bytes moved per point (capped by file_bytes). Default: 256 MiB.
  uint64_t bytes_per_point = uint64_t{256} << 20;
  // Default: 128 KiB .. 64 MiB.
  std::vector<size_t> block_sizes = {128 << 10, 256 << 10, 512 << 10, 1 << 20,
                                     4 << 20,   16 << 20,  64 << 20};
  // Default: 1 .. 64.
  std::vector<int> queue_depths = {1, 4, 8, 16, 32, 64};
  // Which file system runs the sweep: "io_uring" (default) or "posix" (then only block sizes
  // matter, with io_threads = queue depth).
  std::string file_system = "io_uring";
  bool keep_file = false;  // Default: false.
};

struct TunePoint {
  IoKind kind = IoKind::kRead;
  size_t block_size = 0;
  int queue_depth = 0;
  double gbps = 0;  // 1e9 bytes per second
};

struct TuneResult {
  std::string file_system;  // what actually ran (io_uring may fall back to posix)
  bool direct = false;      // whether O_DIRECT was in effect
  std::vector<TunePoint> points;
  TunePoint best_read;
  TunePoint best_write;
  std::string kept_file;  // the scratch file's name with keep_file, else empty
};

Result<TuneResult> RunIoTune(const TuneOptions& options,
                             const std::function<void(const TunePoint&)>& progress = {});

// "4 MiB", "512 KiB", "100 B".
std::string FormatBytes(uint64_t bytes);
// Parses "4M", "4MiB", "512k", "1G", "4096" (binary units).
Result<uint64_t> ParseBytes(const std::string& text);
// Parses a comma-separated list of sizes, "128K,1M,4M", each as ParseBytes does. InvalidArgument
// naming `flag` for a bad size or an empty list.
Result<std::vector<uint64_t>> ParseByteList(const std::string& text, const std::string& flag);

}  // namespace sy::storage
