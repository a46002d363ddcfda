// ReadTextList and RoundTripTexts: the `switchyard tokenize --texts` path.
#include "inference/tokenizer_round_trip.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sy {
namespace {

// One id per byte; refuses to encode text with a '\x01' and to decode ids over 255.
class ByteTokenizer final : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char c : text) {
      if (c == '\x01') return InvalidArgumentError("byte 1 is not encodable");
      ids.push_back(static_cast<unsigned char>(c));
    }
    return ids;
  }
  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids) {
      if (id > 255) return InvalidArgumentError("id " + std::to_string(id));
      text += static_cast<char>(id);
    }
    return text;
  }
  int64_t vocab_size() const override { return 256; }
};

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("sy_round_trip_" + std::to_string(::getpid()) + "_" + name))
                               .string();
  std::ofstream(path) << text;
  return path;
}

TEST(TokenizerRoundTripTest, ReadsAJsonArrayOfStrings) {
  const std::string path = WriteFile("ok.json", R"(["ab", "", "caf\u00e9"])");
  Result<std::vector<std::string>> texts = ReadTextList(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(texts.ok()) << texts.status().ToString();
  EXPECT_EQ(*texts, (std::vector<std::string>{"ab", "", "caf\xc3\xa9"}));
}

TEST(TokenizerRoundTripTest, RejectsAnythingElse) {
  for (const char* bad : {R"({"a": "b"})", R"(["a", 3])", R"(["a")"}) {
    const std::string path = WriteFile("bad.json", bad);
    Result<std::vector<std::string>> texts = ReadTextList(path);
    std::filesystem::remove(path);
    EXPECT_EQ(texts.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(texts.status().message().find(path), std::string::npos) << texts.status().message();
  }
  EXPECT_EQ(ReadTextList("/nonexistent/texts.json").status().code(), StatusCode::kNotFound);
}

TEST(TokenizerRoundTripTest, EncodesAndDecodesEachText) {
  ByteTokenizer tokenizer;
  const std::vector<std::string> texts = {"hi", "", "A"};
  Result<std::vector<TokenizedText>> done = RoundTripTexts(tokenizer, texts);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 3u);
  EXPECT_EQ((*done)[0].ids, (std::vector<int32_t>{104, 105}));
  EXPECT_EQ((*done)[0].decoded, "hi");
  EXPECT_TRUE((*done)[1].ids.empty());
  EXPECT_EQ((*done)[2].ids, (std::vector<int32_t>{65}));
  const std::vector<std::string> bad = {"ok", "a\x01"};
  EXPECT_EQ(RoundTripTexts(tokenizer, bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sy
