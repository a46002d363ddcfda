#include <gtest/gtest.h>

#include <cstdlib>

#include "storage/tools/io_tune.h"
#include "storage/tools/policy_bench.h"
#include "storage/tools/store_bench.h"
#include "tests/storage/test_util.h"

namespace sy::storage {
namespace {

TEST(BytesTest, ParsesAndFormatsBinaryUnits) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("4k"), 4096u);
  EXPECT_EQ(*ParseBytes("4MiB"), 4u << 20);
  EXPECT_EQ(*ParseBytes("1G"), 1ull << 30);
  EXPECT_FALSE(ParseBytes("M4").ok());
  EXPECT_FALSE(ParseBytes("4Q").ok());
  EXPECT_FALSE(ParseBytes("99999999999999999999").ok());
  EXPECT_EQ(FormatBytes(4u << 20), "4 MiB");
  EXPECT_EQ(FormatBytes(512u << 10), "512 KiB");
  EXPECT_EQ(FormatBytes(100), "100 B");
}

TEST(BytesTest, ParsesCommaSeparatedLists) {
  Result<std::vector<uint64_t>> sizes = ParseByteList("128K,1M,4096", "--sizes");
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  EXPECT_EQ(*sizes, (std::vector<uint64_t>{128u << 10, 1u << 20, 4096u}));
  for (const char* bad : {"", "4M,x", ",", "1M,,2M"}) {
    Result<std::vector<uint64_t>> r = ParseByteList(bad, "--sizes");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--sizes"), std::string::npos) << r.status().message();
  }
}

TEST(PolicyBenchTest, CollectsTraceFilesAndTheSavedZipfTraces) {
  testing::TempDir dir;
  // The Zipf traces, saved.
  Result<std::vector<NamedTrace>> zipf = CollectBenchTraces({}, false, 7, dir.path());
  ASSERT_TRUE(zipf.ok()) << zipf.status().ToString();
  ASSERT_EQ(zipf->size(), 3u);
  const NamedTrace& drift = (*zipf)[2];
  EXPECT_EQ(drift.name, "zipf-1.0-drift");
  const std::string file = dir.File("zipf-1.0-drift.trace");
  // Read back from the file alone: the same accesses, named by the path.
  Result<std::vector<NamedTrace>> files = CollectBenchTraces({file}, false, 7, "");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].name, file);
  const AccessTrace& back = (*files)[0].trace;
  EXPECT_EQ(back.num_layers, drift.trace.num_layers);
  EXPECT_EQ(back.num_experts, drift.trace.num_experts);
  ASSERT_EQ(back.accesses.size(), drift.trace.accesses.size());
  for (size_t i = 0; i < back.accesses.size(); ++i) {
    ASSERT_EQ(back.accesses[i].step, drift.trace.accesses[i].step) << i;
    ASSERT_EQ(back.accesses[i].layer, drift.trace.accesses[i].layer) << i;
    ASSERT_EQ(back.accesses[i].expert, drift.trace.accesses[i].expert) << i;
  }
  // The file and the Zipf traces too.
  Result<std::vector<NamedTrace>> both = CollectBenchTraces({file}, true, 7, "");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->size(), 4u);
  EXPECT_EQ(CollectBenchTraces({dir.File("missing.trace")}, false, 7, "").status().code(),
            StatusCode::kNotFound);
}

TEST(IoTuneTest, SweepsEveryPointAndPicksTheBest) {
  testing::TempDir dir;
  TuneOptions options;
  options.dir = dir.path();
  options.file_bytes = 8 << 20;
  options.bytes_per_point = 8 << 20;
  options.block_sizes = {64 << 10, 1 << 20};
  options.queue_depths = {1, 8};
  int progress = 0;
  Result<TuneResult> result = RunIoTune(options, [&](const TunePoint&) { ++progress; });
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->points.size(), 8u);  // 2 x 2 x (read, write)
  EXPECT_EQ(progress, 8);
  double best_read = 0;
  for (const TunePoint& p : result->points) {
    EXPECT_GT(p.gbps, 0);
    if (p.kind == IoKind::kRead) best_read = std::max(best_read, p.gbps);
  }
  EXPECT_EQ(result->best_read.gbps, best_read);
  std::printf("[ tune-io ran on %s, direct=%d ]\n", result->file_system.c_str(), result->direct);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the scratch file is gone";
}

TEST(IoTuneTest, RejectsBadSettings) {
  TuneOptions options;
  EXPECT_EQ(RunIoTune(options).status().code(), StatusCode::kInvalidArgument);
  options.dir = "/tmp";
  options.block_sizes = {1000};
  EXPECT_EQ(RunIoTune(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreBenchTest, SmallRunProducesEveryRowWithFio) {
  if (std::system("fio --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "fio not installed";
  testing::TempDir dir;
  StoreBenchOptions options;
  options.dir = dir.path();
  options.extent_bytes = {256 << 10};
  options.bytes_per_size = 4 << 20;
  options.file_systems = {"posix", "io_uring"};
  options.extents_in_flight = 2;
  Result<StoreBenchReport> report = RunStoreBench(options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->rows.size(), 8u);  // {read, write} x {seq, rand} x 2 file systems
  for (const StoreBenchRow& row : report->rows) {
    EXPECT_GT(row.gbps, 0) << row.op << " " << row.pattern << " " << row.file_system;
    EXPECT_GT(row.fio_gbps, 0);
  }
  std::string table = FormatStoreBench(*report);
  EXPECT_NE(table.find("| 256 KiB | read | seq |"), std::string::npos) << table;
  std::printf("%s", table.c_str());
  // The scratch directory and its stores are gone.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(FioTest, ReportsAFailedRunAsAStatus) {
  if (std::system("fio --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "fio not installed";
  testing::TempDir dir;
  Result<double> gbps = RunFio(
      "fio", {"--name=x", "--filename=" + dir.File("f"), "--size=1M", "--rw=sideways"}, "read");
  EXPECT_FALSE(gbps.ok());
  EXPECT_EQ(RunFio("/no/such/fio", {"--name=x"}, "read").status().code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace sy::storage
