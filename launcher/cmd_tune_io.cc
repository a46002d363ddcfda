// `switchyard tune-io --path DIR`: sweeps block size x queue depth for io_uring reads and writes
// on a scratch file in DIR (the device to tune), in the manner of DeepSpeed's ds_nvme_tune, and
// prints every point and the best setting for reads and for writes.
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "storage/tools/io_tune.h"

namespace sy::launcher {
namespace {

class TuneIoCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--path", options_.dir,
                   "Directory on the device to tune (a scratch file goes "
                   "there and is removed afterwards)")
        ->required();
    app.add_option("--block-sizes", block_sizes_,
                   "Comma-separated block sizes (default 128K,256K,512K,1M,2M,4M)");
    app.add_option("--queue-depths", options_.queue_depths, "Queue depths (default 1 4 8 16 32 64)")
        ->delimiter(',')
        ->check(IntegerRange(1, 4096));
    app.add_option("--file-size", file_size_, "Scratch file size (default 512M)");
    app.add_option("--bytes-per-point", bytes_per_point_, "Bytes moved per point (default 256M)");
    app.add_option("--fs", options_.file_system, "File system to tune: io_uring or posix")
        ->check(CLI::IsMember({"io_uring", "posix"}));
    app.add_flag("--keep-file", options_.keep_file, "Keep the scratch file");
  }

  int Run() override {
    if (!block_sizes_.empty()) {
      Result<std::vector<uint64_t>> sizes = storage::ParseByteList(block_sizes_, "--block-sizes");
      if (!sizes.ok()) return ExitCode(sizes.status());
      options_.block_sizes.assign(sizes->begin(), sizes->end());
    }
    if (!file_size_.empty()) {
      Result<uint64_t> bytes = storage::ParseBytes(file_size_);
      if (!bytes.ok()) return ExitCode(bytes.status().WithContext("--file-size"));
      options_.file_bytes = *bytes;
    }
    if (!bytes_per_point_.empty()) {
      Result<uint64_t> bytes = storage::ParseBytes(bytes_per_point_);
      if (!bytes.ok()) return ExitCode(bytes.status().WithContext("--bytes-per-point"));
      options_.bytes_per_point = *bytes;
    }
    std::printf("tune-io on %s: %zu block sizes x %zu queue depths, reads and writes\n",
                options_.dir.c_str(), options_.block_sizes.size(), options_.queue_depths.size());
    std::printf("%-6s %10s %6s %9s\n", "op", "block", "qd", "GB/s");
    Result<storage::TuneResult> result =
        storage::RunIoTune(options_, [](const storage::TunePoint& point) {
          std::printf(
              "%-6s %10s %6d %9.3f\n", point.kind == storage::IoKind::kRead ? "read" : "write",
              storage::FormatBytes(point.block_size).c_str(), point.queue_depth, point.gbps);
          std::fflush(stdout);
        });
    if (!result.ok()) return ExitCode(result.status());
    std::printf("\nfile system: %s, O_DIRECT: %s\n", result->file_system.c_str(),
                result->direct ? "yes" : "no (the file system refused it)");
    auto best = [](const char* what, const storage::TunePoint& p) {
      std::printf("best %-5s: block_size %s, queue_depth %d -> %.3f GB/s\n", what,
                  storage::FormatBytes(p.block_size).c_str(), p.queue_depth, p.gbps);
    };
    best("read", result->best_read);
    best("write", result->best_write);
    if (!result->kept_file.empty())
      std::printf("kept the scratch file %s\n", result->kept_file.c_str());
    std::printf(
        "set io.block_size / io.queue_depth in the config to the read setting for "
        "inference, the write setting for training write-back\n");
    return 0;
  }

 private:
  storage::TuneOptions options_;
  std::string block_sizes_;
  std::string file_size_;
  std::string bytes_per_point_;
};

}  // namespace

SY_REGISTER_COMMAND("tune-io", "Sweep block size x queue depth on a device and print the best",
                    TuneIoCommand);

}  // namespace sy::launcher
