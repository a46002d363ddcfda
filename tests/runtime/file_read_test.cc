// ReadFile and MappedFile: the two ways a whole file is read (copied into a string, or mapped).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/mapped_file.h"
#include "runtime/core/read_file.h"

namespace sy {
namespace {

// A fresh directory under the working directory, removed with its contents.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::current_path() / "file-read-test-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    const char* made = ::mkdtemp(buffer.data());
    path_ = made != nullptr ? std::string(made) : std::string();
  }
  ~ScratchDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& bytes) const {
    const std::string file = path_ + "/" + name;
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    return file;
  }

 private:
  std::string path_;
};

TEST(ReadFileTest, ReadsEveryByte) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string bytes(200000, '\0');  // several read chunks, with zero and high bytes
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + i / 256);
  Result<std::string> read = ReadFile(dir.Write("data.bin", bytes));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, bytes);
  Result<std::string> empty = ReadFile(dir.Write("empty", ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ReadFileTest, ReadsFilesWithoutASize) {
  // /proc files report size 0 but have contents.
  Result<std::string> self = ReadFile("/proc/self/status");
  ASSERT_TRUE(self.ok()) << self.status().ToString();
  EXPECT_NE(self->find("Name:"), std::string::npos);
}

TEST(ReadFileTest, ErrorsNameThePath) {
  ScratchDir dir;
  const std::string missing = dir.path() + "/missing.json";
  Result<std::string> r = ReadFile(missing);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), missing + " does not exist");

  r = ReadFile(dir.path());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), dir.path() + " is a directory, not a regular file");

  const std::string big = dir.Write("big", std::string(100, 'x'));
  EXPECT_TRUE(ReadFile(big, 100).ok());
  r = ReadFile(big, 99, "a model config");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), big + " is larger than 99 bytes; it is not a model config");
  r = ReadFile("/proc/self/status", 3);  // no size to check up front: caught while reading
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(MappedFileTest, MapsAndMoves) {
  ScratchDir dir;
  const std::string path = dir.Write("six.bin", "abcdef");
  Result<MappedFile> mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  MappedFile moved = std::move(mapped).value();
  ASSERT_EQ(moved.size(), 6u);
  EXPECT_EQ(moved.path(), path);
  EXPECT_EQ(moved.bytes()[2], 'c');
  EXPECT_EQ(moved.data(), moved.bytes().data());

  MappedFile other = std::move(MappedFile::Open(dir.Write("two.bin", "xy")).value());
  other = std::move(moved);
  EXPECT_EQ(other.size(), 6u);
  EXPECT_EQ(other.bytes()[5], 'f');
}

TEST(MappedFileTest, EmptyMissingAndDirectory) {
  ScratchDir dir;
  Result<MappedFile> empty = MappedFile::Open(dir.Write("empty", ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_TRUE(empty->bytes().empty());

  Result<MappedFile> missing = MappedFile::Open(dir.path() + "/nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), dir.path() + "/nope does not exist");
  Result<MappedFile> directory = MappedFile::Open(dir.path());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(directory.status().message(), dir.path() + " is a directory, not a regular file");
}

}  // namespace
}  // namespace sy
