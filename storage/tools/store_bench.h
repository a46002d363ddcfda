// Expert store benchmark (`switchyard bench store`): reads and writes expert-sized extents through
// the ExpertStore on each file system (posix, io_uring, pmem), sequential and random, and runs
// fio (ioengine=io_uring, direct=1) on the same file with the same sizes and parallelism right
// after each measurement, so every row carries its own side-by-side fio figure and ratio.
//
// Per extent size X: a store of N = bytes_per_size / X experts (and N spare extents) is created
// in `dir`, every block of its pool written once, and the experts filled (all untimed), so the
// timed writes and fio's both overwrite allocated blocks. Then, for read and write, sequential and
// random order, and each file system:
//   reads   the N experts stream in with `extents_in_flight` reads at the device (as a prefetcher
//           does, and as fio's iodepth counts), checksums verified on the store's workers while
//           the next reads run (one spare buffer per worker);
//   writes  the N experts go out as one write-back batch (as ExpertCache::Flush does): submitted
//           together, the file system's queue depth bounding what is in flight, timed until the
//           last one is durable and published (group commits, one fdatasync each);
// and fio then moves the same bytes in X-sized blocks at iodepth = extents_in_flight over the same
// region of the file (reads: the N current extents; writes: the 2N-extent pool, N extents' worth,
// end_fsync=1). With match_fio_depth, io_uring keeps as many bytes in flight as fio. Reads run
// before writes because fio's writes overwrite the store's extents. The page cache is dropped
// (POSIX_FADV_DONTNEED) before every run. The file is removed at the end.
//
// Thread-safety: RunStoreBench may run concurrently with itself on different directories.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "storage/store/checksum.h"
#include "storage/fs/file_system.h"

namespace sy::storage {

struct StoreBenchOptions {
  std::string dir;  // Required: a directory on the device to measure.
  // Default: 4, 16 and 64 MiB.
  std::vector<uint64_t> extent_bytes = {uint64_t{4} << 20, uint64_t{16} << 20, uint64_t{64} << 20};
  // Data per extent size (the file is twice this, for the spare extents). Default: 512 MiB.
  uint64_t bytes_per_size = uint64_t{512} << 20;
  // Default: posix, io_uring, pmem.
  std::vector<std::string> file_systems = {"posix", "io_uring", "pmem"};
  // Store requests outstanding, and fio's iodepth. Default: 4.
  int extents_in_flight = 4;
  // File system settings (block size and queue depth for io_uring). Default: IoOptions{}.
  IoOptions io;
  // Give io_uring the queue depth that keeps as many bytes in flight as fio has
  // (extents_in_flight x extent / block_size, per extent size) instead of io.queue_depth.
  // Default: true.
  bool match_fio_depth = true;
  // The fio binary; empty skips fio. Default: "fio".
  std::string fio = "fio";
  // Runs per row; the median is reported. Default: 1.
  int repeats = 1;
  // Extent checksum. Default: xxh3 when available, else crc32c.
  ChecksumKind checksum =
      ChecksumAvailable(ChecksumKind::kXxh3) ? ChecksumKind::kXxh3 : ChecksumKind::kCrc32c;
  uint64_t seed = 1;  // order of the random pattern. Default: 1.
  // Verify each read extent's checksum (StoreOptions::verify_reads), as a store in use does.
  // false measures the I/O path alone. Default: true.
  bool verify_reads = true;
};

struct StoreBenchRow {
  std::string file_system;  // what ran ("io_uring", or "posix" after a fallback)
  std::string requested;    // what was asked for
  uint64_t extent_bytes = 0;
  int queue_depth = 0;  // io_uring blocks in flight
  std::string op;       // "read" or "write"
  std::string pattern;  // "seq" or "rand"
  double gbps = 0;      // 1e9 bytes per second, median over repeats
  double fio_gbps = 0;  // 0 when fio was skipped
  // Median over repeats of (ours / fio) within the same repeat, 0 when fio was skipped. Each
  // repeat runs both back to back, alternating which goes first, so a device whose throughput
  // drifts over seconds (a virtual disk with burst credits) skews neither side.
  double paired_ratio = 0;
  double ratio() const { return paired_ratio; }
};

struct StoreBenchReport {
  std::vector<StoreBenchRow> rows;
  std::string fio_version;  // "" when fio was skipped
};

Result<StoreBenchReport> RunStoreBench(
    const StoreBenchOptions& options,
    const std::function<void(const StoreBenchRow&)>& progress = {});

// A Markdown table of the report.
std::string FormatStoreBench(const StoreBenchReport& report);

// Runs fio with `args` (JSON output) and returns the job's throughput in 1e9 bytes/s for `op`
// ("read" or "write"): io_bytes / job runtime.
Result<double> RunFio(const std::string& fio, const std::vector<std::string>& args,
                      const std::string& op);

}  // namespace sy::storage
