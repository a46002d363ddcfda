#include "storage/tools/store_bench.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <mutex>
#include <numeric>
#include <random>
#include <sstream>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "runtime/core/buffer.h"
#include "runtime/core/file_creation.h"
#include "runtime/core/statistics.h"
#include "runtime/core/temporary_cleanup.h"
#include "runtime/core/unique_fd.h"
#include "storage/hdf5/durable_replace.h"
#include "storage/store/expert_store.h"
#include "storage/tools/io_tune.h"

namespace sy::storage {
namespace {

constexpr uint64_t kZeroChunk = uint64_t{64} << 20;

// Quotes an argument for /bin/sh.
std::string ShellQuote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

Result<std::string> RunCapture(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return ErrnoError("popen", command, errno);
  std::string output;
  char chunk[4096];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0) output.append(chunk, n);
  int rc = ::pclose(pipe);
  if (rc != 0) {
    return IOError("'" + command + "' failed (status " + std::to_string(rc) +
                   "): " + output.substr(0, 500));
  }
  return output;
}

// Drops the file's clean pages from the page cache, so every run reads from the device.
void DropPageCache(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return;
  ::fdatasync(fd.get());
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
}

// Reads every expert of `order` through the store with `in_flight` reads at the device (the way a
// prefetcher streams experts in, and what fio's iodepth counts): a read leaves the device's count
// when its I/O completes (io_done) and frees its buffer when its checksum is verified (done), so
// the checksum of one extent overlaps the I/O of the next. `num_buffers` (> in_flight) buffers of
// `stride` bytes at `buffers`. Returns 1e9 bytes/s.
Result<double> TimeReads(ExpertStore& store, const std::vector<uint32_t>& order, std::byte* buffers,
                         int num_buffers, uint64_t stride, int in_flight) {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int> free_buffers(static_cast<size_t>(num_buffers));
  std::iota(free_buffers.begin(), free_buffers.end(), 0);
  int at_device = 0;
  int outstanding = 0;
  Status first_error;
  auto start = std::chrono::steady_clock::now();
  for (uint32_t expert : order) {
    int slot = 0;
    {
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return !free_buffers.empty() && at_device < in_flight; });
      slot = free_buffers.back();
      free_buffers.pop_back();
      ++at_device;
      ++outstanding;
    }
    std::span<std::byte> buffer(buffers + static_cast<uint64_t>(slot) * stride, stride);
    auto io_done = [&] {
      std::lock_guard<std::mutex> lock(mutex);
      --at_device;
      cv.notify_all();
    };
    auto finish = [&, slot](Status status) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!status.ok() && first_error.ok()) first_error = status;
      free_buffers.push_back(slot);
      --outstanding;
      cv.notify_all();
    };
    store.ReadAsync(ExpertKey{0, expert}, ExtentKind::kWeights, buffer, finish, io_done);
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return outstanding == 0; });
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  SY_RETURN_IF_ERROR(first_error);
  return static_cast<double>(order.size() * stride) / seconds / 1e9;
}

// Writes every expert of `order` as one write-back batch (what ExpertCache::Flush does): all
// submitted at once, the file system's queue depth bounding what is in flight, done when every
// write is durable and published. Returns 1e9 bytes/s.
Result<double> TimeWrites(ExpertStore& store, const std::vector<uint32_t>& order,
                          const std::byte* data, uint64_t stride) {
  std::vector<ExpertStore::WriteRequest> requests;
  for (uint32_t expert : order) {
    requests.push_back(ExpertStore::WriteRequest{ExpertKey{0, expert}, ExtentKind::kWeights,
                                                 std::span<const std::byte>(data, stride)});
  }
  std::mutex mutex;
  std::condition_variable cv;
  size_t remaining = requests.size();
  Status first_error;
  auto start = std::chrono::steady_clock::now();
  store.WriteBatch(requests, [&](size_t, Result<uint64_t> result) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!result.ok() && first_error.ok()) first_error = result.status();
    if (--remaining == 0) cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return remaining == 0; });
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  SY_RETURN_IF_ERROR(first_error);
  return static_cast<double>(order.size() * stride) / seconds / 1e9;
}

}  // namespace

Result<double> RunFio(const std::string& fio, const std::vector<std::string>& args,
                      const std::string& op) {
  std::string command = ShellQuote(fio) + " --output-format=json";
  for (const std::string& arg : args) command += " " + ShellQuote(arg);
  command += " 2>&1";
  SY_ASSIGN_OR_RETURN(std::string output, RunCapture(command));
  size_t brace = output.find('{');
  if (brace == std::string::npos) return IOError("fio printed no JSON: " + output.substr(0, 500));
  nlohmann::json json = nlohmann::json::parse(output.substr(brace), nullptr, false);
  if (json.is_discarded() || !json.contains("jobs") || json["jobs"].empty()) {
    return IOError("fio printed unreadable JSON: " + output.substr(0, 500));
  }
  const nlohmann::json& job = json["jobs"][0];
  if (job.value("error", 0) != 0) {
    return IOError("fio job failed with error " + std::to_string(job.value("error", 0)) + ": " +
                   output.substr(0, 500));
  }
  double bytes = job[op].value("io_bytes", 0.0);
  double runtime_ms = job.value("job_runtime", 0.0);
  if (bytes <= 0 || runtime_ms <= 0) return IOError("fio moved no data: " + output.substr(0, 500));
  return bytes / (runtime_ms / 1000.0) / 1e9;
}

Result<StoreBenchReport> RunStoreBench(const StoreBenchOptions& options,
                                       const std::function<void(const StoreBenchRow&)>& progress) {
  if (options.dir.empty()) return InvalidArgumentError("bench store: --path is required");
  if (options.extents_in_flight < 1) {
    return InvalidArgumentError("bench store: extents in flight must be >= 1");
  }
  // Checked before any file is made: the io_uring depth below divides by it.
  if (options.io.block_size == 0 || options.io.block_size % 4096 != 0) {
    return InvalidArgumentError("bench store: --block-size " +
                                std::to_string(options.io.block_size) +
                                " must be a positive multiple of 4 KiB (4K, 1M, 64M, ...)");
  }
  StoreBenchReport report;
  if (!options.fio.empty()) {
    Result<std::string> version = RunCapture(ShellQuote(options.fio) + " --version 2>&1");
    if (!version.ok()) {
      return version.status().WithContext(
          "bench store: fio is not runnable (pass --fio '' to "
          "skip it)");
    }
    report.fio_version = *version;
    while (!report.fio_version.empty() &&
           std::isspace(static_cast<unsigned char>(report.fio_version.back()))) {
      report.fio_version.pop_back();
    }
  }
  IoOptions setup_io = options.io;
  SY_ASSIGN_OR_RETURN(std::unique_ptr<FileSystem> setup_fs, MakeFileSystem("posix", setup_io));
  // The stores go in a new scratch directory of their own, removed with everything in it on
  // every way out (Ctrl-C and SIGTERM included, a store's own creation temporary too). What a
  // killed run left is removed first.
  const std::string base = options.dir + "/switchyard-bench";
  SY_ASSIGN_OR_RETURN(std::vector<std::string> stale, RemoveStaleTemporariesOf(base));
  for (const std::string& old : stale)
    spdlog::info("bench store: removed {}, left by a killed run", old);
  ScopedTemporary scratch(TemporaryPathFor(base));
  SY_RETURN_IF_ERROR(CreateNewDirectory(scratch.path()).WithContext("bench store"));

  for (uint64_t extent : options.extent_bytes) {
    if (extent == 0 || extent % 4096 != 0) {
      return InvalidArgumentError("bench store: extent size " + std::to_string(extent) +
                                  " must be a positive multiple of 4 KiB");
    }
    auto experts = static_cast<uint32_t>(std::max<uint64_t>(1, options.bytes_per_size / extent));
    const std::string path = scratch.path() + "/" + std::to_string(extent >> 10) + "k.store";

    StoreLayout layout;
    layout.num_layers = 1;
    layout.num_experts = experts;
    layout.checksum = options.checksum;
    layout.kinds.push_back(KindSpec{ExtentKind::kWeights, {extent}, experts});
    uint64_t pool_offset = 0;
    uint64_t pool_bytes = 0;
    // Reads keep extents_in_flight at the device plus one buffer per verifying worker.
    const StoreOptions default_store;
    const int num_buffers = options.extents_in_flight + default_store.worker_threads;
    SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffers,
                        AllocateHostBuffer(extent * static_cast<uint64_t>(num_buffers)));
    auto* data = static_cast<std::byte*>(buffers->data());
    std::mt19937_64 fill(options.seed);
    for (uint64_t i = 0; i + 8 <= extent * static_cast<uint64_t>(num_buffers); i += 8) {
      uint64_t word = fill();
      std::memcpy(data + i, &word, 8);
    }
    std::vector<uint32_t> sequential(experts);
    std::iota(sequential.begin(), sequential.end(), 0u);
    std::vector<uint32_t> shuffled = sequential;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(options.seed));
    {
      StoreOptions store_options;
      store_options.verify_on_open = false;
      SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                          ExpertStore::Create(setup_fs.get(), path, layout, store_options));
      pool_offset = store->kinds()[0].pool_offset;
      pool_bytes = store->kinds()[0].pool_extents * store->kinds()[0].stride;
    }
    {
      // Write every block of the pool once (untimed): the store's writes and fio's then both
      // overwrite allocated, written blocks, with no extent conversion in the file system.
      SY_ASSIGN_OR_RETURN(std::unique_ptr<File> file, setup_fs->Open(path, OpenOptions{}));
      SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> zeros, AllocateHostBuffer(kZeroChunk));
      std::memset(zeros->data(), 0, kZeroChunk);
      for (uint64_t at = 0; at < pool_bytes; at += kZeroChunk) {
        SY_RETURN_IF_ERROR(file->Write(pool_offset + at, zeros->data(),
                                       std::min<uint64_t>(kZeroChunk, pool_bytes - at)));
      }
      SY_RETURN_IF_ERROR(file->Sync());
    }
    {
      StoreOptions store_options;
      store_options.verify_on_open = false;
      SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                          ExpertStore::Open(setup_fs.get(), path, store_options));
      SY_RETURN_IF_ERROR(TimeWrites(*store, sequential, data, extent)
                             .status()
                             .WithContext("bench store: fill " + path));
    }

    Status status;
    for (IoKind kind : {IoKind::kRead, IoKind::kWrite}) {
      for (bool random : {false, true}) {
        for (const std::string& fs_name : options.file_systems) {
          StoreBenchRow row;
          row.requested = fs_name;
          row.extent_bytes = extent;
          row.op = kind == IoKind::kRead ? "read" : "write";
          row.pattern = random ? "rand" : "seq";
          std::vector<double> ours;
          std::vector<double> theirs;
          IoOptions io = options.io;
          if (options.match_fio_depth) {
            uint64_t blocks = (extent + io.block_size - 1) / io.block_size;
            io.queue_depth = static_cast<int>(std::min<uint64_t>(
                4096, blocks * static_cast<uint64_t>(options.extents_in_flight)));
          }
          row.queue_depth = io.queue_depth;
          std::vector<double> ratios;
          for (int repeat = 0; repeat < std::max(1, options.repeats); ++repeat) {
            SY_ASSIGN_OR_RETURN(std::unique_ptr<FileSystem> fs, MakeFileSystem(fs_name, io));
            row.file_system = fs->name();
            auto run_ours = [&]() -> Status {
              DropPageCache(path);
              StoreOptions store_options;
              store_options.verify_on_open = false;  // fio's writes overwrite extents
              store_options.verify_reads = options.verify_reads;
              SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                                  ExpertStore::Open(fs.get(), path, store_options));
              const std::vector<uint32_t>& order = random ? shuffled : sequential;
              Result<double> gbps = kind == IoKind::kRead
                                        ? TimeReads(*store, order, data, num_buffers, extent,
                                                    options.extents_in_flight)
                                        : TimeWrites(*store, order, data, extent);
              if (!gbps.ok()) {
                return gbps.status().WithContext("bench store: " + row.op + " " + row.pattern +
                                                 " via " + fs_name + " on " + path);
              }
              ours.push_back(*gbps);
              return Status::Ok();
            };
            auto run_fio = [&]() -> Status {
              DropPageCache(path);
              uint64_t region = kind == IoKind::kRead ? experts * extent : 2 * experts * extent;
              std::vector<std::string> args = {
                  "--name=switchyard-bench",
                  "--filename=" + path,
                  "--ioengine=io_uring",
                  "--direct=1",
                  "--bs=" + std::to_string(extent),
                  "--iodepth=" + std::to_string(options.extents_in_flight),
                  "--offset=" + std::to_string(pool_offset),
                  "--size=" + std::to_string(region),
                  "--io_size=" + std::to_string(uint64_t{experts} * extent),
                  "--rw=" + std::string(random ? "rand" : "") +
                      (kind == IoKind::kRead ? "read" : "write"),
                  "--randrepeat=0",
              };
              if (kind == IoKind::kWrite) args.push_back("--end_fsync=1");
              Result<double> fio_gbps = RunFio(options.fio, args, row.op);
              if (!fio_gbps.ok()) return fio_gbps.status().WithContext("bench store: fio");
              theirs.push_back(*fio_gbps);
              return Status::Ok();
            };
            if (options.fio.empty()) {
              SY_RETURN_IF_ERROR(run_ours());
              continue;
            }
            if (repeat % 2 == 0) {
              SY_RETURN_IF_ERROR(run_ours());
              SY_RETURN_IF_ERROR(run_fio());
            } else {
              SY_RETURN_IF_ERROR(run_fio());
              SY_RETURN_IF_ERROR(run_ours());
            }
            ratios.push_back(ours.back() / theirs.back());
          }
          row.gbps = Median(ours);
          row.fio_gbps = Median(theirs);
          row.paired_ratio = Median(ratios);
          report.rows.push_back(row);
          if (progress) progress(row);
        }
      }
    }
    SY_RETURN_IF_ERROR(setup_fs->Remove(path));  // the disk back before the next size
    SY_RETURN_IF_ERROR(status);
  }
  return report;
}

std::string FormatStoreBench(const StoreBenchReport& report) {
  std::ostringstream out;
  out << "| extent | op | pattern | file system | uring qd | GB/s | fio GB/s | ratio (paired) |\n";
  out << "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n";
  out << std::fixed;
  for (const StoreBenchRow& row : report.rows) {
    std::string fs = row.file_system;
    if (row.file_system != row.requested) fs += " (asked " + row.requested + ")";
    std::string depth = row.file_system == "io_uring" ? std::to_string(row.queue_depth) : "-";
    out << "| " << FormatBytes(row.extent_bytes) << " | " << row.op << " | " << row.pattern << " | "
        << fs << " | " << depth << " | " << std::setprecision(3) << row.gbps << " | ";
    if (row.fio_gbps > 0) {
      out << row.fio_gbps << " | " << std::setprecision(2) << row.ratio() << " |\n";
    } else {
      out << "- | - |\n";
    }
  }
  return out.str();
}

}  // namespace sy::storage
