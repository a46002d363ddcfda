// Tokenizers: byte-level BPE from tokenizer.json (round trip, merges, added tokens, every refusal
// naming its field) and SentencePiece (a model trained here, round trip).
#include "inference/tokenizer.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#if SY_TEST_SENTENCEPIECE
#include <sentencepiece_trainer.h>
#endif

namespace sy {
namespace {

using nlohmann::json;

std::string Utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

// GPT-2's byte -> character table, written out independently of the library's.
std::string ByteChar(int b) {
  int n = 0;
  for (int k = 0; k < b; ++k) {
    const bool printable = (k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174;
    if (!printable) ++n;
  }
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  return Utf8(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n));
}

// Every byte, then the merges (in rank order), then "<|endoftext|>" and "<|im_start|>".
json ByteLevelTokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                        const json& pre_tokenizer) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = static_cast<int>(vocab.size());
    merge_list.push_back(a + " " + b);
  }
  const int next = static_cast<int>(vocab.size());
  json added = json::array();
  added.push_back({{"id", next}, {"content", "<|endoftext|>"}, {"special", true}});
  added.push_back({{"id", next + 1}, {"content", "<|im_start|>"}, {"special", true}});
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
}

json Gpt2Pre() { return {{"type", "ByteLevel"}, {"add_prefix_space", false}}; }

const std::vector<std::string>& VariedTexts() {
  static const std::vector<std::string> texts = {
      "",
      "Hello world",
      "  leading and trailing  ",
      "tabs\tand\nnewlines\r\n\n\nend",
      "whitespace runs:     five, then\u3000ideographic",
      "日本語のテキストと中文字符",
      "emoji 🙂👍🏽 and a family 👨‍👩‍👧",
      "combining: e\u0301 a\u0308 n\u0303 (decomposed) and é (precomposed)",
      "digits 1234567890 and ١٢٣ arabic-indic",
      "contractions: it's we're they've I'm we'll he'd DON'T",
      "<|im_start|>user\nhi<|endoftext|><|endoftext|>",
      "special inside a word: ab<|endoftext|>cd",
      "mixed: Здравствуй, мир! γειά σου κόσμε",
  };
  return texts;
}

TEST(HfTokenizerTest, RoundTripsVariedUtf8WithMerges) {
  const json doc = ByteLevelTokenizer(
      {{ByteChar(' '), "t"}, {"h", "e"}, {ByteChar(' ') + "t", "he"}, {"l", "l"}, {"o", "r"}},
      Gpt2Pre());
  auto tok = ParseHfTokenizerJson(doc.dump(), "test.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  for (const std::string& text : VariedTexts()) {
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    auto back = (*tok)->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, text);
  }
  // " the" merges to one token by ranks 0, 1, 2.
  auto ids = (*tok)->Encode(" the");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 1u);
  // Added tokens are matched before BPE and get their own ids.
  ids = (*tok)->Encode("<|im_start|>x<|endoftext|>");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*ids)[0], (*tok)->vocab_size() - 1);
  EXPECT_EQ((*ids)[2], (*tok)->vocab_size() - 2);
}

TEST(HfTokenizerTest, Qwen2SplitRoundTrips) {
  const json pre = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  json doc = ByteLevelTokenizer({{"1", "2"}}, pre);
  doc["normalizer"] = {{"type", "NFC"}};
  auto tok = ParseHfTokenizerJson(doc.dump(), "qwen.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  for (const std::string& text : VariedTexts()) {
    if (text.find("\u0301") != std::string::npos) continue;  // NFC composes it: not a round trip
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    auto back = (*tok)->Decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, text);
  }
  // \p{N} alone: digits are never merged across the split.
  auto ids = (*tok)->Encode("12");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 2u);
  // NFC: e + combining acute encodes as the precomposed é.
  auto a = (*tok)->Encode("e\u0301");
  auto b = (*tok)->Encode("\u00e9");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(HfTokenizerTest, RefusesBadFilesNamingTheField) {
  auto expect_error = [](const json& doc, const std::string& field) {
    auto tok = ParseHfTokenizerJson(doc.dump(), "bad.json");
    ASSERT_FALSE(tok.ok()) << field;
    EXPECT_NE(tok.status().message().find(field), std::string::npos) << tok.status().ToString();
  };
  const json good = ByteLevelTokenizer({{"h", "e"}}, Gpt2Pre());
  json doc = good;
  doc["model"]["vocab"]["h"] = -1;
  expect_error(doc, "model.vocab[\"h\"]");
  doc = good;
  doc["model"]["vocab"]["zz"] = "7";
  expect_error(doc, "model.vocab[\"zz\"]");
  doc = good;
  doc["model"]["merges"].push_back("q");
  expect_error(doc, "model.merges[1]");
  doc = good;
  doc["model"]["merges"].push_back("x yz");
  expect_error(doc, "model.merges[1]");
  doc = good;
  doc["model"]["type"] = "WordPiece";
  expect_error(doc, "model.type");
  doc = good;
  doc["added_tokens"][0]["id"] = 1.5;
  expect_error(doc, "added_tokens[0]");
  doc = good;
  doc["added_tokens"][0]["lstrip"] = true;
  expect_error(doc, "added_tokens[0].lstrip");
  doc = good;
  doc["normalizer"] = {{"type", "NFKC"}};
  expect_error(doc, "normalizer.type");
  doc = good;
  doc["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_error(doc, "pre_tokenizer.type");
  doc = good;
  doc.erase("model");
  expect_error(doc, "model");
  EXPECT_FALSE(ParseHfTokenizerJson("{\"model\": {\"model\": 1, \"model\": 2}}", "d.json").ok());
  EXPECT_FALSE(ParseHfTokenizerJson(std::string(100, '[') + std::string(100, ']'), "n").ok());
  EXPECT_FALSE(ParseHfTokenizerJson("not json", "x.json").ok());

  auto tok = ParseHfTokenizerJson(good.dump(), "good.json");
  ASSERT_TRUE(tok.ok());
  EXPECT_FALSE((*tok)->Decode(std::vector<int32_t>{-1}).ok());
  EXPECT_FALSE((*tok)->Decode(std::vector<int32_t>{1 << 20}).ok());
  EXPECT_FALSE((*tok)->Encode("\xff\xfe").ok());  // not UTF-8
}

TEST(TextStreamerTest, HoldsBackSplitCharacters) {
  auto tok = ParseHfTokenizerJson(ByteLevelTokenizer({}, Gpt2Pre()).dump(), "t.json");
  ASSERT_TRUE(tok.ok());
  auto ids = (*tok)->Encode("a🙂b");  // 1 + 4 + 1 byte tokens
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 6u);
  TextStreamer streamer(**tok);
  std::vector<std::string> pieces;
  for (int32_t id : *ids) {
    auto piece = streamer.Append(id);
    ASSERT_TRUE(piece.ok());
    pieces.push_back(*piece);
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "", "", "🙂", "b"}));
  EXPECT_EQ(streamer.Finish(), "");
}

TEST(TextStreamerTest, ShowsBrokenBytesAsReplacementCharacters) {
  auto tok = ParseHfTokenizerJson(ByteLevelTokenizer({}, Gpt2Pre()).dump(), "t.json");
  ASSERT_TRUE(tok.ok());
  // Byte tokens are ids 0..255 in ByteLevelTokenizer: 0xC3 then 'x' is not UTF-8; a lone 0xF0 at
  // the end stays held back until Finish.
  TextStreamer streamer(**tok);
  std::string all;
  for (int32_t id : std::vector<int32_t>{0xc3, 'x', 'y', 0xf0}) {
    auto piece = streamer.Append(id);
    ASSERT_TRUE(piece.ok());
    all += *piece;
  }
  EXPECT_EQ(all, "\uFFFDxy");
  EXPECT_EQ(streamer.Finish(), "\uFFFD");
}

TEST(SentencePieceTokenizerTest, TrainedModelRoundTrips) {
#if SY_TEST_SENTENCEPIECE
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("sy_spm_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string corpus = (dir / "corpus.txt").string();
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 200; ++i) {
      out << "the quick brown fox jumps over the lazy dog " << i << "\n"
          << "日本語のテキスト and 中文字符 mixed with English words\n";
    }
  }
  const std::string prefix = (dir / "tokenizer").string();
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + corpus + " --model_prefix=" + prefix +
      " --vocab_size=400 --model_type=bpe --byte_fallback=true --character_coverage=1.0"
      " --normalization_rule_name=identity --remove_extra_whitespaces=false"
      " --split_digits=true --minloglevel=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  auto tok = LoadTokenizer(dir.string());  // finds tokenizer.model
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  for (const std::string& text : VariedTexts()) {
    if (text.empty() || text[0] == ' ') continue;  // SentencePiece drops one leading space
    auto ids = (*tok)->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    auto back = (*tok)->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, text);
  }
  EXPECT_FALSE((*tok)->Decode(std::vector<int32_t>{100000}).ok());
  std::filesystem::remove_all(dir);
#else
  GTEST_SKIP() << "libsentencepiece not found at build time";
#endif
}

TEST(TokenizerTest, MissingFilesSayWhatToDo) {
  auto tok = LoadTokenizer("/nonexistent-dir");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("--prompt-ids"), std::string::npos);
}

}  // namespace
}  // namespace sy
