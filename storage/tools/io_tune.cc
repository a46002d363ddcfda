#include "storage/tools/io_tune.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>

#include <spdlog/spdlog.h>

#include "runtime/core/buffer.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/temporary_cleanup.h"
#include "storage/hdf5/durable_replace.h"

namespace sy::storage {
namespace {

Result<double> TimeSweep(File& file, IoKind kind, uint64_t bytes, size_t block_size,
                         std::byte* buffer) {
  std::vector<IoOp> ops;
  for (uint64_t at = 0; at < bytes; at += block_size) {
    ops.push_back(IoOp{kind, at, buffer + at,
                       static_cast<size_t>(std::min<uint64_t>(block_size, bytes - at))});
  }
  auto start = std::chrono::steady_clock::now();
  SY_RETURN_IF_ERROR(file.RunBatch(ops));
  if (kind == IoKind::kWrite) SY_RETURN_IF_ERROR(file.Sync());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0) {
    return std::to_string(bytes >> 30) + " GiB";
  }
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= (uint64_t{1} << 10) && bytes % (uint64_t{1} << 10) == 0) {
    return std::to_string(bytes >> 10) + " KiB";
  }
  return std::to_string(bytes) + " B";
}

Result<uint64_t> ParseBytes(const std::string& text) {
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t next = value * 10 + static_cast<uint64_t>(text[i] - '0');
    if (next / 10 != value) return InvalidArgumentError("size '" + text + "' is too large");
    value = next;
    ++i;
  }
  if (i == 0) return InvalidArgumentError("size '" + text + "' must start with a number");
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    shift = 30;
  } else {
    return InvalidArgumentError("size '" + text + "': unknown unit '" + unit + "' (use K, M or G)");
  }
  if (shift > 0 && value > (~uint64_t{0} >> shift)) {
    return InvalidArgumentError("size '" + text + "' is too large");
  }
  return value << shift;
}

Result<std::vector<uint64_t>> ParseByteList(const std::string& text, const std::string& flag) {
  std::vector<uint64_t> out;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    Result<uint64_t> bytes = ParseBytes(item);
    if (!bytes.ok()) return bytes.status().WithContext(flag);
    out.push_back(*bytes);
  }
  if (out.empty()) return InvalidArgumentError(flag + ": give at least one size");
  return out;
}

Result<TuneResult> RunIoTune(const TuneOptions& options,
                             const std::function<void(const TunePoint&)>& progress) {
  if (options.dir.empty()) return InvalidArgumentError("tune-io: --path is required");
  if (options.block_sizes.empty() || options.queue_depths.empty()) {
    return InvalidArgumentError("tune-io: give at least one block size and one queue depth");
  }
  for (size_t bs : options.block_sizes) {
    if (bs == 0 || bs % 4096 != 0) {
      return InvalidArgumentError("tune-io: block size " + std::to_string(bs) +
                                  " must be a positive multiple of 4 KiB");
    }
  }
  for (int qd : options.queue_depths) {
    if (qd < 1 || qd > 4096) {
      return InvalidArgumentError("tune-io: queue depth " + std::to_string(qd) +
                                  " must be in 1..4096");
    }
  }
  size_t max_block = *std::max_element(options.block_sizes.begin(), options.block_sizes.end());
  uint64_t bytes = std::min(options.bytes_per_point, options.file_bytes);
  bytes = bytes / max_block * max_block;
  if (bytes == 0) {
    return InvalidArgumentError("tune-io: bytes per point must hold at least one largest block");
  }
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, AllocateHostBuffer(bytes));
  // Non-zero, incompressible-looking contents.
  auto* data = static_cast<std::byte*>(buffer->data());
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(data + i, &x, 8);
  }

  // The scratch file: a new, unpredictable name, created exclusively (nothing planted in the
  // directory is followed or truncated); removed on every way out, Ctrl-C and SIGTERM included,
  // unless keep_file. What a killed run left is removed first.
  const std::string base = options.dir + "/switchyard-tune-io.dat";
  SY_ASSIGN_OR_RETURN(std::vector<std::string> stale, RemoveStaleTemporariesOf(base));
  for (const std::string& old : stale)
    spdlog::info("tune-io: removed {}, left by a killed run", old);
  ScopedTemporary scratch(TemporaryPathFor(base));
  const std::string& path = scratch.path();
  {
    // Lay the file out once, untimed, so no point pays for block allocation.
    SY_ASSIGN_OR_RETURN(std::unique_ptr<FileSystem> posix, MakeFileSystem("posix"));
    OpenOptions create;
    create.create = true;
    create.exclusive = true;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<File> file, posix->Open(path, create));
    SY_RETURN_IF_ERROR(file->Write(0, data, bytes).WithContext("tune-io: lay out " + path));
    SY_RETURN_IF_ERROR(file->Sync().WithContext("tune-io: lay out " + path));
  }
  TuneResult result;
  Status status;
  for (size_t block_size : options.block_sizes) {
    for (int queue_depth : options.queue_depths) {
      IoOptions io;
      io.block_size = block_size;
      io.queue_depth = queue_depth;
      io.io_threads = queue_depth;
      io.direct = true;
      Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem(options.file_system, io);
      if (!fs.ok()) {
        status = fs.status();
        break;
      }
      result.file_system = (*fs)->name();
      OpenOptions open_options;
      open_options.create = true;
      Result<std::unique_ptr<File>> file = (*fs)->Open(path, open_options);
      if (!file.ok()) {
        status = file.status();
        break;
      }
      result.direct = (*file)->alignment() > 1;
      for (IoKind kind : {IoKind::kWrite, IoKind::kRead}) {
        // A posix sweep gets its parallelism from one op per thread, block_size each.
        Result<double> gbps = TimeSweep(**file, kind, bytes, block_size, data);
        if (!gbps.ok()) {
          status = gbps.status().WithContext("tune-io on " + path);
          break;
        }
        TunePoint point{kind, block_size, queue_depth, *gbps};
        result.points.push_back(point);
        TunePoint& best = kind == IoKind::kRead ? result.best_read : result.best_write;
        if (point.gbps > best.gbps) best = point;
        if (progress) progress(point);
      }
      if (!status.ok()) break;
    }
    if (!status.ok()) break;
  }
  SY_RETURN_IF_ERROR(status);
  if (options.keep_file) {
    result.kept_file = path;
    scratch.Release();
  }
  return result;
}

}  // namespace sy::storage
