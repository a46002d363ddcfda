// Tests of the file datasets: uint16/uint32 token files and byte-level text, their windows, the
// held-out tail, and clear errors for files that are too short or malformed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "runtime/data/text_dataset.h"
#include "runtime/data/token_file_dataset.h"

namespace sy {
namespace {

class TempPath {
 public:
  explicit TempPath(const std::string& suffix) {
    path_ =
        (std::filesystem::temp_directory_path() /
         ("sy_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++) + suffix))
            .string();
  }
  ~TempPath() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

  void Write(const std::string& bytes) const {
    std::ofstream(path_, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // Little-endian tokens of `width` bytes.
  void WriteTokens(const std::vector<uint32_t>& tokens, int width) const {
    std::string bytes;
    for (uint32_t token : tokens) {
      for (int b = 0; b < width; ++b) bytes.push_back(static_cast<char>((token >> (8 * b)) & 0xff));
    }
    Write(bytes);
  }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

std::vector<uint32_t> Iota(size_t n, uint32_t start = 0) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<uint32_t>(i);
  return v;
}

TEST(TokenFileDatasetTest, WindowsOfU16Tokens) {
  TempPath file(".bin");
  file.WriteTokens(Iota(103), 2);  // 10 windows of 10 tokens, 3 left over
  auto dataset = TokenFileDataset::Open(file.path(), TokenDType::kU16, 9, 0, 0.2);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  const Dataset& d = **dataset;
  EXPECT_EQ(d.size(Split::kTrain), 8);
  EXPECT_EQ(d.size(Split::kEval), 2);
  EXPECT_EQ(d.vocab_size(), 103);
  EXPECT_EQ(d.num_tasks(), 1);
  EXPECT_EQ(d.task_name(0), "tokens");
  std::vector<int32_t> tokens(9), targets(9);
  ASSERT_EQ(*d.Get(Split::kTrain, 3, tokens, targets), 0);
  for (int t = 0; t < 9; ++t) {
    EXPECT_EQ(tokens[t], 30 + t);
    EXPECT_EQ(targets[t], 31 + t);
  }
  ASSERT_TRUE(d.Get(Split::kEval, 0, tokens, targets).ok());
  EXPECT_EQ(tokens[0], 80) << "eval is the tail of the file";
  ASSERT_TRUE(d.Get(Split::kEval, 1, tokens, targets).ok());
  EXPECT_EQ(targets[8], 99);
}

TEST(TokenFileDatasetTest, SplitsShareNoToken) {
  TempPath file(".bin");
  file.WriteTokens(Iota(1000, 7), 4);
  auto dataset = TokenFileDataset::Open(file.path(), TokenDType::kU32, 15, 5000, 0.1);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  // The file holds distinct tokens, so overlap of windows shows as a shared token value.
  std::set<int32_t> train, eval;
  std::vector<int32_t> tokens(15), targets(15);
  for (Split split : {Split::kTrain, Split::kEval}) {
    for (int64_t i = 0; i < (*dataset)->size(split); ++i) {
      ASSERT_TRUE((*dataset)->Get(split, i, tokens, targets).ok());
      auto& seen = split == Split::kTrain ? train : eval;
      seen.insert(tokens.begin(), tokens.end());
      seen.insert(targets.begin(), targets.end());
    }
  }
  EXPECT_EQ((*dataset)->size(Split::kEval), 6);
  EXPECT_EQ((*dataset)->vocab_size(), 5000);
  for (int32_t token : eval) EXPECT_EQ(train.count(token), 0u) << token;
}

TEST(TokenFileDatasetTest, FileShorterThanOneWindowNamesTheFile) {
  TempPath file(".bin");
  file.WriteTokens(Iota(16), 2);
  auto dataset = TokenFileDataset::Open(file.path(), TokenDType::kU16, 16, 0, 0.1);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dataset.status().message(),
            "data file " + file.path() +
                ": holds 16 tokens, fewer than one window of data.seq_len + 1 = 17 tokens; use a "
                "longer file or a smaller data.seq_len");
  // Exactly one window: a train split and no eval split.
  auto one = TokenFileDataset::Open(file.path(), TokenDType::kU16, 15, 0, 0.1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ((*one)->size(Split::kTrain), 1);
  EXPECT_EQ((*one)->size(Split::kEval), 0);
}

TEST(TokenFileDatasetTest, MalformedFilesAreRejected) {
  TempPath odd(".bin");
  odd.Write(std::string(21, '\1'));
  auto size = TokenFileDataset::Open(odd.path(), TokenDType::kU16, 4, 0, 0.1);
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("size 21 bytes is not a whole number of u16 tokens"),
            std::string::npos)
      << size.status().message();
  EXPECT_NE(size.status().message().find(odd.path()), std::string::npos);

  TempPath big(".bin");
  std::vector<uint32_t> tokens = Iota(40);
  tokens[17] = 600;
  big.WriteTokens(tokens, 2);
  auto vocab = TokenFileDataset::Open(big.path(), TokenDType::kU16, 4, 512, 0.1);
  ASSERT_FALSE(vocab.ok());
  EXPECT_EQ(vocab.status().message(),
            "data file " + big.path() +
                ": token 17 is 600, outside the vocabulary [0, 512); raise data.vocab_size or "
                "check data.token_dtype");

  EXPECT_FALSE(TokenFileDataset::Open(big.path(), TokenDType::kU16, 4, int64_t{1} << 40, 0.1).ok())
      << "tokens are int32";

  TempPath huge(".bin");
  huge.WriteTokens({1, 2, 0x80000000u, 3, 4, 5}, 4);
  EXPECT_FALSE(TokenFileDataset::Open(huge.path(), TokenDType::kU32, 2, 0, 0.0).ok());

  auto missing = TokenFileDataset::Open("/nonexistent/tokens.bin", TokenDType::kU16, 4, 0, 0.1);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/tokens.bin"), std::string::npos);
}

TEST(TextDatasetTest, BytesWithBosAndEos) {
  TempPath file(".txt");
  file.Write("hello, w\xc3\xb6rld");  // 13 bytes + BOS + EOS = 15 tokens = 3 windows of 5
  auto dataset = TextDataset::Open(file.path(), 4, 0.0);
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  EXPECT_EQ((*dataset)->vocab_size(), 258);
  EXPECT_EQ((*dataset)->size(Split::kTrain), 3);
  std::vector<int32_t> tokens(4), targets(4);
  ASSERT_TRUE((*dataset)->Get(Split::kTrain, 0, tokens, targets).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{kTextBos, 'h', 'e', 'l'}));
  EXPECT_EQ(targets, (std::vector<int32_t>{'h', 'e', 'l', 'l'}));
  ASSERT_TRUE((*dataset)->Get(Split::kTrain, 2, tokens, targets).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{0xb6, 'r', 'l', 'd'}));
  EXPECT_EQ(targets, (std::vector<int32_t>{'r', 'l', 'd', kTextEos}));

  auto whole = TextDataset::Open(file.path(), 14, 0.0);
  ASSERT_TRUE(whole.ok());
  std::vector<int32_t> all(14), next(14);
  ASSERT_TRUE((*whole)->Get(Split::kTrain, 0, all, next).ok());
  EXPECT_EQ(next.back(), kTextEos);
}

TEST(TextDatasetTest, EmptyAndMissingFiles) {
  TempPath empty(".txt");
  empty.Write("");
  auto dataset = TextDataset::Open(empty.path(), 8, 0.1);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find(empty.path()), std::string::npos);
  EXPECT_NE(dataset.status().message().find("holds 2 tokens"), std::string::npos);
  EXPECT_EQ(TextDataset::Open("/nonexistent.txt", 8, 0.1).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(TextDataset::Open(std::filesystem::temp_directory_path().string(), 8, 0.1).ok());
}

TEST(DataFileTest, SampleHashSeesAChangedByteAndSize) {
  TempPath file(".bin");
  file.Write("abcdef");
  auto mapped = OpenDataFile(file.path());
  ASSERT_TRUE(mapped.ok());
  const uint64_t hash = DataFileSampleHash(mapped->bytes());
  EXPECT_EQ(DataFileSampleHash(mapped->bytes()), hash);
  file.Write("abcdeg");
  auto changed = OpenDataFile(file.path());
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(DataFileSampleHash(changed->bytes()), hash);
  file.Write("abcdefg");
  auto longer = OpenDataFile(file.path());
  ASSERT_TRUE(longer.ok());
  EXPECT_NE(DataFileSampleHash(longer->bytes()), hash);
}

TEST(DataFileTest, ErrorsPointAtDataPath) {
  auto missing = OpenDataFile("/nonexistent/tokens.bin");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "data file /nonexistent/tokens.bin does not exist; check data.path");
}

}  // namespace
}  // namespace sy
