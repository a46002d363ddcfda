#include "storage/fs/fault_injection_file_system.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "storage/fs/mem_file_system.h"

namespace sy::storage {
namespace {

class FaultInjectionTest : public ::testing::Test {
 protected:
  std::unique_ptr<File> Open(const std::string& path) {
    OpenOptions options;
    options.create = true;
    Result<std::unique_ptr<File>> file = fs_.Open(path, options);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    return std::move(*file);
  }

  MemFileSystem base_;
  FaultInjectionFileSystem fs_{&base_, 99};
};

TEST_F(FaultInjectionTest, FailsTheChosenWriteWithTheChosenErrno) {
  std::unique_ptr<File> file = Open("/x/store");
  fs_.AddRule(FaultRule{FaultOp::kWrite, FaultKind::kError, ENOSPC, "store", /*skip=*/2, 1, 0});
  std::vector<uint8_t> data(100, 1);
  EXPECT_TRUE(file->Write(0, data.data(), 100).ok());
  EXPECT_TRUE(file->Write(100, data.data(), 100).ok());
  Status third = file->Write(200, data.data(), 100);
  EXPECT_EQ(third.code(), StatusCode::kResourceExhausted) << third.ToString();
  EXPECT_NE(third.message().find("/x/store at offset 200"), std::string::npos) << third.message();
  EXPECT_TRUE(file->Write(200, data.data(), 100).ok());  // fired once only
  EXPECT_EQ(fs_.faults_fired(), 1);
  EXPECT_EQ(*file->Size(), 300u);
}

TEST_F(FaultInjectionTest, PathFilterAndSyncAndReadFaults) {
  std::unique_ptr<File> a = Open("/a");
  std::unique_ptr<File> b = Open("/b");
  fs_.AddRule(FaultRule{FaultOp::kSync, FaultKind::kError, EIO, "/b", 0, -1, 0});
  fs_.AddRule(FaultRule{FaultOp::kRead, FaultKind::kError, EIO, "/a", 0, 1, 0});
  EXPECT_TRUE(a->Sync().ok());
  Status sync = b->Sync();
  EXPECT_EQ(sync.code(), StatusCode::kIOError);
  EXPECT_NE(sync.message().find("Input/output error"), std::string::npos) << sync.message();
  EXPECT_FALSE(b->Sync().ok());  // forever
  std::vector<uint8_t> data(10, 3);
  ASSERT_TRUE(a->Write(0, data.data(), 10).ok());
  EXPECT_FALSE(a->Read(0, data.data(), 10).ok());
  EXPECT_TRUE(a->Read(0, data.data(), 10).ok());
}

TEST_F(FaultInjectionTest, DelayedReadsTakeLongerAndSucceed) {
  std::unique_ptr<File> file = Open("/slow");
  std::vector<uint8_t> data(10, 5);
  ASSERT_TRUE(file->Write(0, data.data(), 10).ok());
  fs_.AddRule(FaultRule{.op = FaultOp::kRead,
                        .kind = FaultKind::kDelay,
                        .path_contains = "/slow",
                        .times = 2,
                        .delay_us = 30000});
  for (int i = 0; i < 3; ++i) {
    std::vector<uint8_t> back(10, 0);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(file->Read(0, back.data(), 10).ok());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(back, data);
    if (i < 2) {  // the third runs at full speed
      EXPECT_GE(ms, 30.0) << "read " << i;
    }
  }
  EXPECT_EQ(fs_.faults_fired(), 2);
}

TEST_F(FaultInjectionTest, ShortWriteStoresOnlyThePrefix) {
  std::unique_ptr<File> file = Open("/f");
  std::vector<uint8_t> zeros(1000, 0);
  ASSERT_TRUE(file->Write(0, zeros.data(), 1000).ok());
  fs_.AddRule(FaultRule{FaultOp::kWrite, FaultKind::kShortWrite, 0, "", 0, 1, 300});
  std::vector<uint8_t> ones(1000, 1);
  Status status = file->Write(0, ones.data(), 1000);
  EXPECT_EQ(status.code(), StatusCode::kIOError);
  EXPECT_NE(status.message().find("short write"), std::string::npos);
  std::vector<uint8_t> back(1000);
  ASSERT_TRUE(file->Read(0, back.data(), 1000).ok());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(back[i], i < 300 ? 1 : 0) << i;
}

TEST_F(FaultInjectionTest, DropUnsyncedDataRestoresTheLastSyncedState) {
  std::vector<uint8_t> oracle(64 << 10);
  std::mt19937 rng(5);
  for (auto& b : oracle) b = static_cast<uint8_t>(rng());
  {
    std::unique_ptr<File> file = Open("/d");
    ASSERT_TRUE(file->Write(0, oracle.data(), oracle.size()).ok());
    ASSERT_TRUE(file->Sync().ok());
    std::vector<uint8_t> junk(10000, 0xEE);
    ASSERT_TRUE(file->Write(5000, junk.data(), junk.size()).ok());
    ASSERT_TRUE(file->Write(70000, junk.data(), junk.size()).ok());  // grows the file
  }
  ASSERT_TRUE(fs_.DropUnsyncedData().ok());
  Result<std::vector<uint8_t>> after = base_.Contents("/d");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, oracle);
}

TEST_F(FaultInjectionTest, TornWriteCrashesAndTearingKeepsSectorsOldOrNew) {
  std::vector<uint8_t> old_bytes(8192, 0x11);
  std::vector<uint8_t> new_bytes(8192, 0x22);
  {
    std::unique_ptr<File> file = Open("/t");
    ASSERT_TRUE(file->Write(0, old_bytes.data(), old_bytes.size()).ok());
    ASSERT_TRUE(file->Sync().ok());
    fs_.AddRule(FaultRule{FaultOp::kWrite, FaultKind::kTornWrite, EIO, "", 0, 1, 0});
    Status torn = file->Write(0, new_bytes.data(), new_bytes.size());
    EXPECT_FALSE(torn.ok());
    EXPECT_TRUE(fs_.crashed());
    EXPECT_FALSE(file->Sync().ok());  // everything fails after the crash
  }
  ASSERT_TRUE(fs_.DropUnsyncedData(/*tear=*/true).ok());
  EXPECT_FALSE(fs_.crashed());
  Result<std::vector<uint8_t>> after = base_.Contents("/t");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 8192u);
  int old_sectors = 0;
  int new_sectors = 0;
  for (size_t s = 0; s < 16; ++s) {
    uint8_t first = (*after)[s * 512];
    for (size_t i = 0; i < 512; ++i) ASSERT_EQ((*after)[s * 512 + i], first) << "sector " << s;
    ASSERT_TRUE(first == 0x11 || first == 0x22);
    (first == 0x11 ? old_sectors : new_sectors)++;
  }
  // 16 coin flips twice over: all-old or all-new is possible but vanishingly rare with seed 99.
  EXPECT_GT(old_sectors, 0);
  EXPECT_GT(new_sectors, 0);
}

}  // namespace
}  // namespace sy::storage
