// `switchyard bench store`: expert-sized extent reads and writes through the expert store on
// posix, io_uring and pmem, sequential and random, each beside fio (io_uring, direct) on the same
// file with the same sizes, with the ratio to fio (storage/tools/store_bench.h).
//
// `switchyard bench cache`: hit rates of MoESys LFU, LRU and W-TinyLFU against Belady's optimum on
// expert access traces (recorded routing traces, or the standard Zipf traces), at cache sizes of
// 10-50% of the experts (storage/tools/policy_bench.h). It lives here, beside the store benchmark,
// as the other half of the storage stack's measurements.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "runtime/core/file_creation.h"
#include "storage/formats/text_file.h"
#include "storage/store/checksum.h"
#include "storage/tools/io_tune.h"
#include "storage/tools/policy_bench.h"
#include "storage/tools/store_bench.h"

namespace sy::launcher {
namespace {

class BenchStoreCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--path", options_.dir, "Directory on the device to measure")->required();
    app.add_option("--sizes", sizes_, "Extent sizes, comma-separated (default 4M,16M,64M)");
    app.add_option("--bytes", bytes_, "Data per extent size (default 512M; the file is twice)");
    app.add_option("--fs", options_.file_systems, "File systems (default posix,io_uring,pmem)")
        ->delimiter(',');
    app.add_option("--in-flight", options_.extents_in_flight,
                   "Extents in flight, and fio's iodepth (default 4)")
        ->check(IntegerRange(1, 4096));
    app.add_option("--block-size", block_size_,
                   "io_uring block size (default 64M: one request per extent up to 64 MiB)");
    app.add_option("--queue-depth", queue_depth_,
                   "io_uring queue depth (default: as many bytes in flight as fio, "
                   "in-flight x extent / block size)")
        ->check(IntegerRange(1, 4096));
    app.add_option("--fio", options_.fio, "fio binary; '' skips fio (default fio)");
    app.add_option("--repeats", options_.repeats, "Runs per row; the median is reported")
        ->check(IntegerRange(1, 1000));
    app.add_option("--checksum", checksum_, "Extent checksum: xxh3 or crc32c");
    app.add_flag("!--no-verify", options_.verify_reads,
                 "Skip the checksum check of read extents (the I/O path alone)");
    app.add_option("--output", output_, "Also write the Markdown table to this file");
    AddJsonOptions(app, &json_);
  }

  int Run() override {
    if (!sizes_.empty()) {
      Result<std::vector<uint64_t>> sizes = storage::ParseByteList(sizes_, "--sizes");
      if (!sizes.ok()) return ExitCode(sizes.status());
      options_.extent_bytes = *sizes;
    }
    if (!bytes_.empty()) {
      Result<uint64_t> bytes = storage::ParseBytes(bytes_);
      if (!bytes.ok()) return ExitCode(bytes.status().WithContext("--bytes"));
      options_.bytes_per_size = *bytes;
    }
    if (!block_size_.empty()) {
      Result<uint64_t> bytes = storage::ParseBytes(block_size_);
      if (!bytes.ok()) return ExitCode(bytes.status().WithContext("--block-size"));
      options_.io.block_size = static_cast<size_t>(*bytes);
    }
    if (queue_depth_ > 0) {
      options_.io.queue_depth = queue_depth_;
      options_.match_fio_depth = false;
    }
    if (!checksum_.empty()) {
      Result<storage::ChecksumKind> kind = storage::ParseChecksumKind(checksum_);
      if (!kind.ok()) return ExitCode(kind.status().WithContext("--checksum"));
      options_.checksum = *kind;
    }
    // With --json, stdout holds the JSON alone: the progress and the table go to stderr.
    std::FILE* text = json_.print ? stderr : stdout;
    std::fprintf(text, "bench store on %s (block %s, queue depth %s, %d in flight, checksum %s)\n",
                 options_.dir.c_str(), storage::FormatBytes(options_.io.block_size).c_str(),
                 options_.match_fio_depth ? "matched to fio"
                                          : std::to_string(options_.io.queue_depth).c_str(),
                 options_.extents_in_flight,
                 std::string(storage::ChecksumKindName(options_.checksum)).c_str());
    Result<storage::StoreBenchReport> report =
        storage::RunStoreBench(options_, [text](const storage::StoreBenchRow& row) {
          std::fprintf(text, "  %-8s %-5s %-4s %-9s %7.3f GB/s  fio %7.3f GB/s  ratio %.2f\n",
                       storage::FormatBytes(row.extent_bytes).c_str(), row.op.c_str(),
                       row.pattern.c_str(), row.file_system.c_str(), row.gbps, row.fio_gbps,
                       row.ratio());
          std::fflush(text);
        });
    if (!report.ok()) return ExitCode(report.status());
    std::string table = storage::FormatStoreBench(*report);
    std::fprintf(text, "\n%s", table.c_str());
    if (!report->fio_version.empty()) std::fprintf(text, "fio: %s\n", report->fio_version.c_str());
    if (!output_.empty()) {
      if (int code = ExitCode(WriteFileReplacing(output_, table)); code != 0) return code;
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const storage::StoreBenchRow& row : report->rows) {
      rows.push_back({{"file_system", row.file_system},
                      {"requested", row.requested},
                      {"extent_bytes", row.extent_bytes},
                      {"queue_depth", row.queue_depth},
                      {"op", row.op},
                      {"pattern", row.pattern},
                      {"gbps", row.gbps},
                      {"fio_gbps", row.fio_gbps},
                      {"paired_ratio", row.paired_ratio}});
    }
    const nlohmann::json json = {{"dir", options_.dir},
                                 {"block_bytes", options_.io.block_size},
                                 {"extents_in_flight", options_.extents_in_flight},
                                 {"checksum", storage::ChecksumKindName(options_.checksum)},
                                 {"fio_version", report->fio_version},
                                 {"rows", rows}};
    return ExitCode(EmitJson(json_, json.dump(2)).status());
  }

 private:
  storage::StoreBenchOptions options_;
  std::string sizes_;
  std::string bytes_;
  std::string block_size_;
  std::string checksum_;
  std::string output_;
  JsonOutput json_;
  int queue_depth_ = 0;
};

class BenchCacheCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--trace", traces_,
                   "Trace files (docs/storage.md format); default: the standard Zipf traces");
    app.add_flag("--zipf", zipf_, "Also run the standard Zipf traces when --trace is given");
    app.add_option("--fractions", options_.fractions,
                   "Cache sizes as fractions of all experts (default 0.1,0.2,0.3,0.4,0.5)")
        ->delimiter(',')
        ->check(NumberRange(0, 1));
    app.add_option("--threshold", options_.lfu.threshold, "MoESys LFU hit threshold (default 0)")
        ->check(NumberRange(0, 1e9));
    app.add_option("--beta", options_.lfu.beta, "MoESys LFU decay factor (default 0.5)")
        ->check(NumberRange(0, 1));
    app.add_option("--decay-every", options_.lfu.decay_every,
                   "MoESys LFU steps between decays, K (default 25)")
        ->check(IntegerRange(1, int64_t{1} << 40));
    app.add_option("--warmup", options_.warmup_fraction,
                   "Leading fraction of steps not counted (default 0.1)")
        ->check(NumberRange(0, 1));
    app.add_option("--seed", seed_, "Seed of the Zipf traces (default 1)")
        ->check(IntegerRange(0, INT64_MAX));
    app.add_option("--save-traces", save_dir_, "Write the Zipf traces into this directory");
    app.add_option("--output", output_, "Also write the Markdown table to this file");
    AddJsonOptions(app, &json_);
  }

  int Run() override {
    Result<std::vector<storage::NamedTrace>> traces =
        storage::CollectBenchTraces(traces_, zipf_, seed_, save_dir_);
    if (!traces.ok()) return ExitCode(traces.status());
    std::vector<storage::PolicyBenchRow> rows = storage::RunPolicyBench(*traces, options_);
    std::string table = storage::FormatPolicyBench(rows);
    std::fprintf(json_.print ? stderr : stdout,
                 "MoESys LFU: threshold %g, beta %g, K %lld steps; warm-up %.0f%% of steps\n\n%s",
                 options_.lfu.threshold, options_.lfu.beta,
                 static_cast<long long>(options_.lfu.decay_every), options_.warmup_fraction * 100,
                 table.c_str());
    if (!output_.empty()) {
      if (int code = ExitCode(WriteFileReplacing(output_, table)); code != 0) return code;
    }
    nlohmann::json json_rows = nlohmann::json::array();
    for (const storage::PolicyBenchRow& row : rows) {
      json_rows.push_back({{"trace", row.trace},
                           {"fraction", row.fraction},
                           {"capacity", row.capacity},
                           {"accesses", row.accesses},
                           {"hit_rate",
                            {{"lfu", row.lfu},
                             {"lru", row.lru},
                             {"wtinylfu", row.wtinylfu},
                             {"belady", row.belady}}}});
    }
    const nlohmann::json json = {{"lfu",
                                  {{"threshold", options_.lfu.threshold},
                                   {"beta", options_.lfu.beta},
                                   {"decay_every", options_.lfu.decay_every}}},
                                 {"warmup_fraction", options_.warmup_fraction},
                                 {"rows", json_rows}};
    return ExitCode(EmitJson(json_, json.dump(2)).status());
  }

 private:
  storage::PolicyBenchOptions options_;
  std::vector<std::string> traces_;
  bool zipf_ = false;
  uint64_t seed_ = 1;
  std::string save_dir_;
  std::string output_;
  JsonOutput json_;
};

}  // namespace

SY_REGISTER_COMMAND("bench store",
                    "Expert extent reads/writes via posix, io_uring and pmem, beside fio",
                    BenchStoreCommand);
SY_REGISTER_COMMAND("bench cache",
                    "Expert cache hit rates: MoESys LFU, LRU, W-TinyLFU vs Belady on traces",
                    BenchCacheCommand);

}  // namespace sy::launcher
