#include "storage/fs/file_system.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/core/buffer.h"
#include "runtime/core/build_info.h"
#include "storage/fs/fault_injection_file_system.h"
#include "storage/fs/mem_file_system.h"
#include "tests/storage/test_util.h"
#if SY_HAVE_IO_URING
#include "storage/fs/uring_file_system.h"
#endif

namespace sy::storage {
namespace {

// Every implementation runs the same contract tests. "fault" is the fault-injecting wrapper over
// an in-memory file system with no rules: it must be transparent.
class FileSystemContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    IoOptions io;
    io.block_size = 64 << 10;  // small blocks, so ops split into many
    io.queue_depth = 4;
    io.io_threads = 3;
    if (GetParam() == "fault") {
      base_ = std::make_unique<MemFileSystem>(2);
      fs_ = std::make_unique<FaultInjectionFileSystem>(base_.get());
    } else {
      Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem(GetParam(), io);
      ASSERT_TRUE(fs.ok()) << fs.status().ToString();
      fs_ = std::move(*fs);
    }
    root_ = GetParam() == "mem" || GetParam() == "fault" ? std::string("/mem") : dir_.path();
    std::printf("[ file system '%s' runs as '%s' ]\n", GetParam().c_str(), fs_->name().c_str());
  }

  std::unique_ptr<File> OpenNew(const std::string& name) {
    OpenOptions options;
    options.create = true;
    options.truncate = true;
    Result<std::unique_ptr<File>> file = fs_->Open(root_ + "/" + name, options);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    return file.ok() ? std::move(*file) : nullptr;
  }

  testing::TempDir dir_;
  std::unique_ptr<FileSystem> base_;
  std::unique_ptr<FileSystem> fs_;
  std::string root_;
};

TEST_P(FileSystemContractTest, WritesAndReadsBackAlignedAndUnaligned) {
  std::unique_ptr<File> file = OpenNew("a.dat");
  ASSERT_NE(file, nullptr);
  std::printf("[ alignment %zu ]\n", file->alignment());
  std::vector<uint8_t> oracle(3 << 20, 0);
  std::mt19937_64 rng(42);
  Result<std::shared_ptr<Buffer>> buffer = AllocateHostBuffer(1 << 20);
  ASSERT_TRUE(buffer.ok());
  auto* aligned = static_cast<uint8_t*>((*buffer)->data());
  // Aligned (direct path), unaligned address (bounce), unaligned offset and length (buffered).
  struct Case {
    uint64_t offset;
    size_t length;
    size_t address_shift;
  };
  for (Case c : {Case{0, 1 << 20, 0}, Case{1 << 20, 256 << 10, 8}, Case{(1 << 20) + 12345, 7777, 0},
                 Case{2 << 20, 4096, 0}, Case{100, 1, 3}}) {
    uint8_t* data = aligned + c.address_shift;
    for (size_t i = 0; i < c.length; ++i) data[i] = static_cast<uint8_t>(rng());
    ASSERT_TRUE(file->Write(c.offset, data, c.length).ok());
    std::memcpy(oracle.data() + c.offset, data, c.length);
  }
  Result<uint64_t> size = file->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, (2u << 20) + 4096);
  std::vector<uint8_t> back(*size);
  ASSERT_TRUE(file->Read(0, back.data(), back.size()).ok());
  EXPECT_EQ(0, std::memcmp(back.data(), oracle.data(), back.size()));
  // An aligned read into an aligned buffer, through the direct path.
  ASSERT_TRUE(file->Read(1 << 20, aligned, 256 << 10).ok());
  EXPECT_EQ(0, std::memcmp(aligned, oracle.data() + (1 << 20), 256 << 10));
  EXPECT_TRUE(file->Sync().ok());
}

TEST_P(FileSystemContractTest, BatchesCompleteEveryOpOnce) {
  std::unique_ptr<File> file = OpenNew("batch.dat");
  ASSERT_NE(file, nullptr);
  constexpr size_t kOps = 64;
  constexpr size_t kBytes = 20000;  // unaligned on purpose, and spans several 64 KiB blocks
  std::vector<std::vector<uint8_t>> out(kOps, std::vector<uint8_t>(kBytes));
  std::vector<IoOp> writes;
  for (size_t i = 0; i < kOps; ++i) {
    for (size_t j = 0; j < kBytes; ++j) out[i][j] = static_cast<uint8_t>(i * 31 + j * 7);
    writes.push_back(IoOp{IoKind::kWrite, i * kBytes, out[i].data(), kBytes});
  }
  ASSERT_TRUE(file->RunBatch(writes).ok());
  std::vector<std::vector<uint8_t>> in(kOps, std::vector<uint8_t>(kBytes));
  std::vector<IoOp> reads;
  for (size_t i = 0; i < kOps; ++i) {
    reads.push_back(IoOp{IoKind::kRead, (kOps - 1 - i) * kBytes, in[i].data(), kBytes});
  }
  std::vector<int> calls(kOps, 0);
  std::mutex mutex;
  std::condition_variable cv;
  size_t remaining = kOps;
  file->SubmitBatch(reads, [&](size_t index, Status status) {
    EXPECT_TRUE(status.ok()) << status.ToString();
    std::lock_guard<std::mutex> lock(mutex);
    ++calls[index];
    if (--remaining == 0) cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return remaining == 0; });
  }
  for (size_t i = 0; i < kOps; ++i) {
    EXPECT_EQ(calls[i], 1);
    EXPECT_EQ(in[i], out[kOps - 1 - i]) << "op " << i;
  }
}

TEST_P(FileSystemContractTest, ReadPastEndIsDataLossNamingFileAndOffset) {
  std::unique_ptr<File> file = OpenNew("short.dat");
  ASSERT_NE(file, nullptr);
  std::vector<uint8_t> data(8192, 7);
  ASSERT_TRUE(file->Write(0, data.data(), data.size()).ok());
  Result<std::shared_ptr<Buffer>> buffer = AllocateHostBuffer(16384);
  ASSERT_TRUE(buffer.ok());
  Status status = file->Read(4096, (*buffer)->data(), 8192);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  EXPECT_NE(status.message().find("short.dat"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("offset"), std::string::npos) << status.message();
  // The bytes that do exist are still readable.
  EXPECT_TRUE(file->Read(4096, (*buffer)->data(), 4096).ok());
}

TEST_P(FileSystemContractTest, TruncateRenameRemoveExists) {
  std::unique_ptr<File> file = OpenNew("t.dat");
  ASSERT_NE(file, nullptr);
  ASSERT_TRUE(file->Truncate(1 << 20).ok());
  EXPECT_EQ(*file->Size(), 1u << 20);
  std::vector<uint8_t> zeros(4096, 1);
  ASSERT_TRUE(file->Read((1 << 20) - 4096, zeros.data(), zeros.size()).ok());
  EXPECT_EQ(zeros, std::vector<uint8_t>(4096, 0));
  ASSERT_TRUE(file->Truncate(100).ok());
  EXPECT_EQ(*file->Size(), 100u);
  file.reset();
  std::string from = root_ + "/t.dat";
  std::string to = root_ + "/u.dat";
  ASSERT_TRUE(fs_->Rename(from, to).ok());
  EXPECT_FALSE(*fs_->Exists(from));
  EXPECT_TRUE(*fs_->Exists(to));
  EXPECT_TRUE(fs_->SyncDir(root_).ok());
  ASSERT_TRUE(fs_->Remove(to).ok());
  EXPECT_FALSE(*fs_->Exists(to));
  Result<std::unique_ptr<File>> missing = fs_->Open(to, OpenOptions{});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(AllFileSystems, FileSystemContractTest,
                         ::testing::Values("mem", "posix", "io_uring", "pmem", "fault"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(MakeFileSystemTest, RejectsUnknownNames) {
  Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem("floppy");
  EXPECT_EQ(fs.status().code(), StatusCode::kInvalidArgument);
}

TEST(MakeFileSystemTest, IoUringFallsBackToPosixWhenUnavailable) {
  ::setenv("SY_IO_URING_DISABLE", "1", 1);
  Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem("io_uring");
  ::unsetenv("SY_IO_URING_DISABLE");
  ASSERT_TRUE(fs.ok());
  EXPECT_EQ((*fs)->name(), "posix");
}

TEST(MakeFileSystemTest, ReportsWhetherIoUringRunsHere) {
  Result<std::unique_ptr<FileSystem>> fs = MakeFileSystem("io_uring");
  ASSERT_TRUE(fs.ok());
  std::printf("[ io_uring on this machine: %s ]\n",
              (*fs)->name() == "io_uring" ? "available" : "unavailable, posix fallback");
  EXPECT_TRUE((*fs)->name() == "io_uring" || (*fs)->name() == "posix");
}

#if SY_HAVE_IO_URING
TEST(UringCompletionTest, ClassifiesEveryOutcome) {
  using internal::ClassifyUringCompletion;
  using internal::UringStep;
  EXPECT_EQ(ClassifyUringCompletion(4096, 4096), UringStep::kDone);
  EXPECT_EQ(ClassifyUringCompletion(100, 4096), UringStep::kContinue);
  EXPECT_EQ(ClassifyUringCompletion(0, 4096), UringStep::kEndOfFile);
  EXPECT_EQ(ClassifyUringCompletion(-EAGAIN, 4096), UringStep::kRetry);
  EXPECT_EQ(ClassifyUringCompletion(-EINTR, 4096), UringStep::kRetry);
  EXPECT_EQ(ClassifyUringCompletion(-EIO, 4096), UringStep::kError);
  EXPECT_EQ(ClassifyUringCompletion(-ENOSPC, 4096), UringStep::kError);
}

TEST(UringFileSystemTest, FixedBuffersCarryTheSameBytes) {
  IoOptions io;
  io.block_size = 64 << 10;
  io.queue_depth = 8;
  Result<std::unique_ptr<FileSystem>> fs = UringFileSystem::Create(io);
  if (!fs.ok()) GTEST_SKIP() << "io_uring unavailable here: " << fs.status().ToString();
  testing::TempDir dir;
  Result<std::shared_ptr<Buffer>> region = AllocateHostBuffer(1 << 20);
  ASSERT_TRUE(region.ok());
  iovec iov{(*region)->data(), 1 << 20};
  Status registered = (*fs)->RegisterBuffers(std::span<const iovec>(&iov, 1));
  std::printf("[ fixed buffers: %s ]\n", registered.ok() ? "registered" : "not registered");
  OpenOptions options;
  options.create = true;
  Result<std::unique_ptr<File>> file = (*fs)->Open(dir.File("fixed.dat"), options);
  ASSERT_TRUE(file.ok());
  auto* bytes = static_cast<uint8_t*>((*region)->data());
  for (size_t i = 0; i < (1 << 20); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 5);
  std::vector<uint8_t> expected(bytes, bytes + (1 << 20));
  ASSERT_TRUE((*file)->Write(0, bytes, 1 << 20).ok());
  std::memset(bytes, 0, 1 << 20);
  ASSERT_TRUE((*file)->Read(0, bytes, 1 << 20).ok());
  EXPECT_EQ(0, std::memcmp(bytes, expected.data(), expected.size()));
  (*fs)->UnregisterBuffers();
  file->reset();
}
#endif

}  // namespace
}  // namespace sy::storage
