// Tests of Config: loading, JSON errors with positions, --set overrides and effective dumps.
#include "runtime/config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sy {
namespace {

using nlohmann::json;

class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    path_ =
        (std::filesystem::temp_directory_path() / ("sy_config_test_" + std::to_string(::getpid()) +
                                                   "_" + std::to_string(counter_++) + ".json"))
            .string();
    std::ofstream(path_) << contents;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

TEST(ConfigTest, LoadsBlocksFromFile) {
  TempFile file(R"({"train": {"steps": 10}, "model": {"num_experts": 4}})");
  Result<Config> config = Config::Load(file.path());
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->source(), file.path());
  ASSERT_NE(config->Find("train.steps"), nullptr);
  EXPECT_EQ(*config->Find("train.steps"), 10);
  EXPECT_EQ(*config->Find("model.num_experts"), 4);
  EXPECT_EQ(config->Find("train.lr"), nullptr);
  EXPECT_EQ(config->Find("nothing.here"), nullptr);
}

TEST(ConfigTest, MissingFileIsNotFoundNamingThePath) {
  Result<Config> config = Config::Load("/nonexistent/dir/tiny.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kNotFound);
  EXPECT_NE(config.status().message().find("/nonexistent/dir/tiny.json"), std::string::npos);
  EXPECT_NE(config.status().message().find("not found"), std::string::npos);
}

TEST(ConfigTest, DirectoryIsRejected) {
  Result<Config> config = Config::Load(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("directory"), std::string::npos);
}

TEST(ConfigTest, MalformedJsonReportsLineAndColumn) {
  TempFile file("{\n  \"train\": {\n    \"steps\": 10,\n  }\n}\n");
  Result<Config> config = Config::Load(file.path());
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = config.status().message();
  EXPECT_NE(message.find("config " + file.path() + ": malformed JSON at line 4, column 3"),
            std::string::npos)
      << message;
}

TEST(ConfigTest, MalformedJsonOnFirstLine) {
  Result<Config> config = Config::Parse("{\"a\": tru}", "x.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("config x.json: malformed JSON at line 1, column"),
            std::string::npos)
      << config.status().message();
}

TEST(ConfigTest, NumberOverflowIsAnError) {
  Result<Config> config = Config::Parse(R"({"a": 1e99999})", "big.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("config big.json: malformed JSON: number overflow"),
            std::string::npos)
      << config.status().message();
  Config empty;
  ASSERT_TRUE(empty.ApplyOverride("a.b=1e99999").ok());
  EXPECT_EQ(*empty.Find("a.b"), "1e99999") << "an unparsable value is taken as text";
}

TEST(ConfigTest, InvalidUtf8OverrideIsRejected) {
  Config config;
  Status status = config.ApplyOverride("a.b=\xff\xfe");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("not valid UTF-8"), std::string::npos) << status.message();
}

TEST(ConfigTest, DuplicateKeyIsNamed) {
  Result<Config> config =
      Config::Parse(R"({"train": {"steps": 1, "lr": 2, "steps": 3}})", "dup.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "config dup.json: key 'train.steps' appears more than once; keep one");
}

TEST(ConfigTest, SameKeyInDifferentBlocksIsFine) {
  Result<Config> config = Config::Parse(R"({"a": {"x": 1}, "b": {"x": 2}})", "ok.json");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
}

TEST(ConfigTest, TopLevelMustBeObject) {
  Result<Config> config = Config::Parse("[1, 2]", "arr.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("top level must be a JSON object"), std::string::npos);
  EXPECT_NE(config.status().message().find("got array [1,2]"), std::string::npos);
}

TEST(ConfigTest, ExcessiveNestingIsRejected) {
  std::string deep = "{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}";
  Result<Config> config = Config::Parse(deep, "deep.json");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("nesting deeper"), std::string::npos);
}

TEST(ConfigTest, OverridesParseJsonValuesOrFallBackToStrings) {
  Config config;
  ASSERT_TRUE(config.ApplyOverride("train.steps=100").ok());
  ASSERT_TRUE(config.ApplyOverride("train.lr=2.5e-4").ok());
  ASSERT_TRUE(config.ApplyOverride("train.flag=true").ok());
  ASSERT_TRUE(config.ApplyOverride("train.list=[1,2,3]").ok());
  ASSERT_TRUE(config.ApplyOverride("data.path=/data/x.bin").ok());
  ASSERT_TRUE(config.ApplyOverride("data.quoted=\"42\"").ok());
  ASSERT_TRUE(config.ApplyOverride("data.empty=").ok());
  ASSERT_TRUE(config.ApplyOverride("data.tasks.copy.weight=2").ok());
  ASSERT_TRUE(config.ApplyOverride("data.eq=a=b").ok());
  ASSERT_TRUE(config.ApplyOverride("data.trick=1,\"w\":2").ok());
  EXPECT_EQ(*config.Find("train.steps"), 100);
  EXPECT_TRUE(config.Find("train.steps")->is_number_integer());
  EXPECT_DOUBLE_EQ(config.Find("train.lr")->get<double>(), 2.5e-4);
  EXPECT_EQ(*config.Find("train.flag"), true);
  EXPECT_EQ(*config.Find("train.list"), json({1, 2, 3}));
  EXPECT_EQ(*config.Find("data.path"), "/data/x.bin");
  EXPECT_EQ(*config.Find("data.quoted"), "42");
  EXPECT_EQ(*config.Find("data.empty"), "");
  EXPECT_EQ(*config.Find("data.tasks.copy.weight"), 2);
  EXPECT_EQ(*config.Find("data.eq"), "a=b");
  EXPECT_EQ(*config.Find("data.trick"), "1,\"w\":2");
}

TEST(ConfigTest, LaterOverrideWinsAndOverridesReplaceFileValues) {
  Result<Config> config = Config::Parse(R"({"train": {"steps": 5, "lr": 1}})", "f.json");
  ASSERT_TRUE(config.ok());
  std::vector<std::string> sets = {"train.steps=7", "train.steps=9"};
  ASSERT_TRUE(config->ApplyOverrides(sets).ok());
  EXPECT_EQ(*config->Find("train.steps"), 9);
  EXPECT_EQ(*config->Find("train.lr"), 1);
  ASSERT_NE(config->FindOverride("train.steps"), nullptr);
  EXPECT_EQ(config->FindOverride("train.steps")->assignment, "train.steps=9");
  EXPECT_EQ(config->FindOverride("train.lr"), nullptr);
  EXPECT_EQ(config->Where("train.steps"), "config f.json: --set train.steps=9");
  EXPECT_EQ(config->Where("train.lr"), "config f.json");
}

TEST(ConfigTest, OverrideOfABlockCoversItsKeys) {
  Config config;
  ASSERT_TRUE(config.ApplyOverride(R"(data.tasks={"copy":{"weight":3}})").ok());
  EXPECT_EQ(*config.Find("data.tasks.copy.weight"), 3);
  ASSERT_NE(config.FindOverride("data.tasks.copy.weight"), nullptr);
  EXPECT_EQ(config.FindOverride("data.tasksx"), nullptr);
}

// A --set could build a config deeper than Parse accepts, so that the effective config (which a
// checkpoint keeps, and a resume parses) did not parse back (config_fuzzer, 2026-11-27).
TEST(ConfigTest, OverrideDeeperThanParseAcceptsIsRejected) {
  auto dotted = [](int parts) {
    std::string key = "a";
    for (int i = 1; i < parts; ++i) key += ".k";
    return key;
  };
  // Within the limit, the dump parses back.
  for (const std::string& set : {dotted(64) + "=1", dotted(62) + "=[[]]", dotted(63) + "={}"}) {
    Config config;
    ASSERT_TRUE(config.ApplyOverride(set).ok()) << set;
    Result<Config> again = Config::Parse(config.DumpEffective(), "effective.json");
    EXPECT_TRUE(again.ok()) << again.status().ToString();
  }
  // One level more: refused, and the config is unchanged.
  for (const std::string& set : {dotted(65) + "=1", dotted(63) + "=[[]]", dotted(64) + "={}"}) {
    Config config;
    Status status = config.ApplyOverride(set);
    ASSERT_FALSE(status.ok()) << set;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("levels deep"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("more than 64"), std::string::npos) << status.message();
    EXPECT_TRUE(config.overrides().empty());
    EXPECT_TRUE(Config::Parse(config.DumpEffective(), "effective.json").ok());
  }
}

TEST(ConfigTest, MalformedOverridesAreRejected) {
  Config config;
  Status no_equals = config.ApplyOverride("train.steps");
  EXPECT_EQ(no_equals.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_equals.message().find("--set 'train.steps' is malformed: expected key=value"),
            std::string::npos)
      << no_equals.message();
  for (const char* bad : {"=5", ".a=1", "a.=1", "a..b=1"}) {
    Status status = config.ApplyOverride(bad);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("malformed"), std::string::npos) << status.message();
  }
  EXPECT_TRUE(config.overrides().empty());
}

TEST(ConfigTest, OverrideThroughAScalarIsRejected) {
  Result<Config> config = Config::Parse(R"({"train": {"steps": 5}})", "f.json");
  ASSERT_TRUE(config.ok());
  Status status = config->ApplyOverride("train.steps.x=1");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "config f.json: --set train.steps.x=1: 'train.steps' is integer 5, not a block of "
            "keys, so it has no key 'x'");
}

TEST(ConfigTest, UnknownBlockIsNamedWithSuggestion) {
  Result<Config> config = Config::Parse(R"({"trian": {}, "model": {}})", "b.json");
  ASSERT_TRUE(config.ok());
  Status status = config->CheckKnownBlocks({"model", "train", "data"});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "config b.json: unknown block 'trian'; did you mean 'train'?");
  EXPECT_TRUE(config->CheckKnownBlocks({"model", "trian"}).ok());
}

TEST(ConfigTest, UnknownBlockFromOverrideNamesTheSet) {
  Config config;
  ASSERT_TRUE(config.ApplyOverride("zzzzzz.x=1").ok());
  Status status = config.CheckKnownBlocks({"model", "train"});
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "config <empty>: --set zzzzzz.x=1: unknown block 'zzzzzz'; this command reads the "
            "blocks: model, train");
}

TEST(ConfigTest, EffectiveMergesRecordedBlocks) {
  Result<Config> config = Config::Parse(R"({"train": {"steps": 5}, "log": {"every": 2}})", "e");
  ASSERT_TRUE(config.ok());
  config->RecordEffective("train", json{{"steps", 5}, {"lr", 0.1}});
  config->RecordEffective("inference.cache", json{{"slots", 4}});
  json effective = config->Effective();
  EXPECT_EQ(effective["train"], (json{{"steps", 5}, {"lr", 0.1}}));
  EXPECT_EQ(effective["log"], (json{{"every", 2}}));
  EXPECT_EQ(effective["inference"]["cache"]["slots"], 4);
  EXPECT_EQ(json::parse(config->DumpEffective()), effective);
}

TEST(ConfigTest, DescribeJsonValue) {
  EXPECT_EQ(DescribeJsonValue(json("eight")), "string \"eight\"");
  EXPECT_EQ(DescribeJsonValue(json(3)), "integer 3");
  EXPECT_EQ(DescribeJsonValue(json(-3)), "integer -3");
  EXPECT_EQ(DescribeJsonValue(json(2.5)), "number 2.5");
  EXPECT_EQ(DescribeJsonValue(json(true)), "boolean true");
  EXPECT_EQ(DescribeJsonValue(json(nullptr)), "null");
  EXPECT_EQ(DescribeJsonValue(json::parse("[1,2]")), "array [1,2]");
  const std::string longer = DescribeJsonValue(json(std::string(500, 'x')));
  EXPECT_LE(longer.size(), 80u);
  EXPECT_NE(longer.find("..."), std::string::npos);
}

TEST(ConfigTest, SplitDottedKey) {
  EXPECT_EQ(SplitDottedKey("a.b.c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(SplitDottedKey("a"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(SplitDottedKey("a..b"), (std::vector<std::string>{"a", "", "b"}));
}

}  // namespace
}  // namespace sy
