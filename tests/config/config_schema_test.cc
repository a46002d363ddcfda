// Tests of ConfigSchema: binding blocks to structs, defaults, every kind of error and the
// effective-config round trip.
#include "runtime/config/config_schema.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/config/edit_distance.h"

namespace sy {
namespace {

using nlohmann::json;

enum class Source { kSynthetic, kTokens, kText };

struct TaskWeights {
  double copy = 1.0;
  double sort = 1.0;
};

struct Options {
  int64_t steps = 1000;
  int num_experts = 4;
  uint32_t seed = 7;
  double lr = 3e-4;
  float beta = 0.9f;
  bool shuffle = true;
  std::string path = "default.bin";
  std::vector<int> dims = {1, 2};
  Source source = Source::kSynthetic;
  TaskWeights tasks;
};

ConfigSchema<TaskWeights> TaskSchema() {
  ConfigSchema<TaskWeights> schema;
  schema.Field("copy", &TaskWeights::copy, "Copy task weight")
      .Min(0)
      .Field("sort", &TaskWeights::sort, "Sort task weight")
      .Min(0);
  return schema;
}

const ConfigSchema<Options>& Schema() {
  static const ConfigSchema<Options>* schema = [] {
    auto* s = new ConfigSchema<Options>();
    s->Field("steps", &Options::steps, "Number of optimizer steps")
        .Min(1)
        .Field("num_experts", &Options::num_experts, "Experts per MoE layer")
        .Min(1)
        .Max(1024)
        .Field("seed", &Options::seed, "Random seed")
        .Field("lr", &Options::lr, "Learning rate")
        .Field("beta", &Options::beta, "Momentum")
        .Field("shuffle", &Options::shuffle, "Shuffle the data")
        .Field("path", &Options::path, "Token file")
        .Field("dims", &Options::dims, "Mesh dims")
        .Enum("source", &Options::source,
              {{"synthetic", Source::kSynthetic},
               {"tokens", Source::kTokens},
               {"text", Source::kText}},
              "Where samples come from")
        .Nested("tasks", &Options::tasks, TaskSchema(), "Task mixture weights")
        .Check([](const Options& o) -> std::optional<ConfigIssue> {
          if (o.steps % 2 == 1 && !o.shuffle) {
            return ConfigIssue{"steps", "must be even when shuffle is false"};
          }
          return std::nullopt;
        });
    return s;
  }();
  return *schema;
}

Config Parse(const std::string& text) {
  Result<Config> config = Config::Parse(text, "examples/configs/tiny.json");
  SY_CHECK(config.ok()) << config.status().ToString();
  return std::move(config).value();
}

Status BindText(const std::string& text, Options* out, std::vector<std::string> sets = {}) {
  Config config = Parse(text);
  SY_RETURN_IF_ERROR(config.ApplyOverrides(sets));
  return Schema().Bind(config, "train", out);
}

TEST(ConfigSchemaTest, AbsentBlockBindsDefaults) {
  Config config = Parse("{}");
  Options options;
  ASSERT_TRUE(Schema().Bind(config, "train", &options).ok());
  EXPECT_EQ(options.steps, 1000);
  EXPECT_EQ(options.path, "default.bin");
  EXPECT_EQ(options.source, Source::kSynthetic);
}

TEST(ConfigSchemaTest, BindsEveryFieldKind) {
  Options o;
  Status status = BindText(R"({"train": {"steps": 1e3, "num_experts": 8, "seed": 4000000000,
      "lr": 1, "beta": 0.5, "shuffle": false, "path": "x.bin", "dims": [4, 5, 6],
      "source": "text", "tasks": {"sort": 3}}})",
                           &o);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(o.steps, 1000);
  EXPECT_EQ(o.num_experts, 8);
  EXPECT_EQ(o.seed, 4000000000u);
  EXPECT_DOUBLE_EQ(o.lr, 1.0);
  EXPECT_FLOAT_EQ(o.beta, 0.5f);
  EXPECT_FALSE(o.shuffle);
  EXPECT_EQ(o.path, "x.bin");
  EXPECT_EQ(o.dims, (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(o.source, Source::kText);
  EXPECT_DOUBLE_EQ(o.tasks.copy, 1.0);
  EXPECT_DOUBLE_EQ(o.tasks.sort, 3.0);
}

TEST(ConfigSchemaTest, UnknownKeySuggestsNearest) {
  Options o;
  Status status = BindText(R"({"train": {"stpes": 5}})", &o);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "config examples/configs/tiny.json: unknown key 'train.stpes'; did you mean "
            "'train.steps'?");
  EXPECT_EQ(o.steps, 1000) << "a failed bind leaves the struct unchanged";
}

TEST(ConfigSchemaTest, UnknownNestedKeySuggestsNearest) {
  Options o;
  Status status = BindText(R"({"train": {"tasks": {"cpy": 2}}})", &o);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "config examples/configs/tiny.json: unknown key 'train.tasks.cpy'; did you mean "
            "'train.tasks.copy'?");
}

TEST(ConfigSchemaTest, UnknownKeyWithNothingCloseListsTheKeys) {
  Options o;
  Status status = BindText(R"({"train": {"tasks": {"zzzzzzzzzz": 2}}})", &o);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "config examples/configs/tiny.json: unknown key 'train.tasks.zzzzzzzzzz'; the keys "
            "of 'train.tasks' are: copy, sort");
}

TEST(ConfigSchemaTest, WrongTypeNamesKeyAndValue) {
  Options o;
  Status status = BindText(R"({"train": {"num_experts": "eight"}})", &o);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            "config examples/configs/tiny.json: 'train.num_experts' must be an integer, got "
            "string \"eight\"");
}

struct WrongTypeCase {
  const char* json_text;
  const char* expected_tail;
};

TEST(ConfigSchemaTest, WrongTypesOfEveryKind) {
  const std::vector<WrongTypeCase> cases = {
      {R"({"train": {"steps": 2.5}})", "'train.steps' must be an integer, got number 2.5"},
      {R"({"train": {"num_experts": 3000000000}})",
       "'train.num_experts' must be an integer in [-2147483648, 2147483647], got integer "
       "3000000000"},
      {R"({"train": {"seed": -1}})",
       "'train.seed' must be an integer in [0, 4294967295], got integer -1"},
      {R"({"train": {"lr": "fast"}})", "'train.lr' must be a number, got string \"fast\""},
      {R"({"train": {"beta": 1e300}})",
       "'train.beta' must be a finite number of magnitude at most"},
      {R"({"train": {"shuffle": 1}})", "'train.shuffle' must be true or false, got integer 1"},
      {R"({"train": {"path": 5}})", "'train.path' must be a string, got integer 5"},
      {R"({"train": {"dims": 5}})", "'train.dims' must be an array of integer, got integer 5"},
      {R"({"train": {"dims": [1, "x"]}})",
       "'train.dims' has element [1] that must be an integer, got string \"x\""},
      {R"({"train": {"source": "toknes"}})",
       "'train.source' must be one of \"synthetic\", \"tokens\", \"text\", got string "
       "\"toknes\"; did you mean \"tokens\"?"},
      {R"({"train": {"source": 3}})",
       "'train.source' must be one of \"synthetic\", \"tokens\", \"text\", got integer 3"},
      {R"({"train": {"tasks": 3}})",
       "'train.tasks' must be a block (a JSON object of keys), got integer 3"},
      {R"({"train": 3})", "'train' must be a block (a JSON object of keys), got integer 3"},
      {R"({"train": {"steps": null}})", "'train.steps' must be an integer, got null"},
  };
  for (const WrongTypeCase& c : cases) {
    Options o;
    Status status = BindText(c.json_text, &o);
    ASSERT_FALSE(status.ok()) << c.json_text;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    const std::string expected =
        std::string("config examples/configs/tiny.json: ") + c.expected_tail;
    EXPECT_EQ(status.message().substr(0, expected.size()), expected) << status.message();
  }
}

TEST(ConfigSchemaTest, BoundsAreChecked) {
  Options o;
  Status low = BindText(R"({"train": {"steps": 0}})", &o);
  EXPECT_EQ(low.message(),
            "config examples/configs/tiny.json: 'train.steps' must be >= 1, got integer 0");
  Status high = BindText(R"({"train": {"num_experts": 2048}})", &o);
  EXPECT_EQ(high.message(),
            "config examples/configs/tiny.json: 'train.num_experts' must be <= 1024, got integer "
            "2048");
  Status nested = BindText(R"({"train": {"tasks": {"copy": -1}}})", &o);
  EXPECT_EQ(nested.message(),
            "config examples/configs/tiny.json: 'train.tasks.copy' must be >= 0, got integer -1");
}

TEST(ConfigSchemaTest, CrossFieldCheck) {
  Options o;
  Status status = BindText(R"({"train": {"steps": 3, "shuffle": false}})", &o);
  EXPECT_EQ(status.message(),
            "config examples/configs/tiny.json: 'train.steps' must be even when shuffle is false");
  EXPECT_TRUE(BindText(R"({"train": {"steps": 4, "shuffle": false}})", &o).ok());
}

TEST(ConfigSchemaTest, OverridesBindAndErrorsNameTheSet) {
  Options o;
  Status ok = BindText("{}", &o, {"train.steps=100", "train.tasks.copy.weight_unused=1"});
  ASSERT_FALSE(ok.ok());
  EXPECT_EQ(ok.message(),
            "config examples/configs/tiny.json: --set train.tasks.copy.weight_unused=1: 'train."
            "tasks.copy' must be a number, got object {\"weight_unused\":1}");

  Options good;
  ASSERT_TRUE(
      BindText(R"({"train": {"steps": 5}})", &good, {"train.steps=100", "train.tasks.sort=2"})
          .ok());
  EXPECT_EQ(good.steps, 100);
  EXPECT_DOUBLE_EQ(good.tasks.sort, 2.0);

  Options bad;
  Status unknown = BindText("{}", &bad, {"train.stpes=100"});
  EXPECT_EQ(unknown.message(),
            "config examples/configs/tiny.json: --set train.stpes=100: unknown key "
            "'train.stpes'; did you mean 'train.steps'?");
  Status type = BindText("{}", &bad, {"train.num_experts=eight"});
  EXPECT_EQ(type.message(),
            "config examples/configs/tiny.json: --set train.num_experts=eight: "
            "'train.num_experts' must be an integer, got string \"eight\"");
}

TEST(ConfigSchemaTest, StringFieldTakesRawOverrideText) {
  Options o;
  ASSERT_TRUE(BindText("{}", &o, {"train.path=123"}).ok());
  EXPECT_EQ(o.path, "123");
  ASSERT_TRUE(BindText("{}", &o, {"train.path=true"}).ok());
  EXPECT_EQ(o.path, "true");
  // From the file a number for a string field is still an error.
  EXPECT_FALSE(BindText(R"({"train": {"path": 123}})", &o).ok());
}

TEST(ConfigSchemaTest, EffectiveConfigRoundTrips) {
  Config config = Parse(R"({"train": {"steps": 42, "source": "tokens"}, "other": {"x": 1}})");
  ASSERT_TRUE(config.ApplyOverride("train.tasks.copy=0.25").ok());
  Options first;
  ASSERT_TRUE(Schema().Bind(config, "train", &first).ok());
  json effective = config.Effective();
  EXPECT_EQ(effective["train"]["steps"], 42);
  EXPECT_EQ(effective["train"]["lr"], 3e-4) << "defaults are written out";
  EXPECT_EQ(effective["train"]["source"], "tokens");
  EXPECT_EQ(effective["train"]["tasks"]["copy"], 0.25);
  EXPECT_EQ(effective["other"]["x"], 1) << "unbound blocks are kept";

  Result<Config> reloaded = Config::Parse(config.DumpEffective(), "effective.json");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().ToString();
  Options second;
  ASSERT_TRUE(Schema().Bind(*reloaded, "train", &second).ok());
  EXPECT_EQ(second.steps, first.steps);
  EXPECT_EQ(second.lr, first.lr);
  EXPECT_EQ(second.beta, first.beta);
  EXPECT_EQ(second.dims, first.dims);
  EXPECT_EQ(second.source, first.source);
  EXPECT_EQ(second.tasks.copy, first.tasks.copy);
  EXPECT_EQ(reloaded->Effective(), effective);
}

TEST(ConfigSchemaTest, BindsDottedBlocks) {
  Config config = Parse(R"({"inference": {"cache": {"steps": 3}}})");
  Options o;
  ASSERT_TRUE(Schema().Bind(config, "inference.cache", &o).ok());
  EXPECT_EQ(o.steps, 3);
  EXPECT_EQ(config.Effective()["inference"]["cache"]["steps"], 3);
}

TEST(ConfigSchemaTest, DescribeListsEveryKeyWithDefaults) {
  std::vector<ConfigFieldDoc> docs = Schema().Describe("train");
  ASSERT_EQ(docs.size(), 12u);
  EXPECT_EQ(docs[0].key, "train.steps");
  EXPECT_EQ(docs[0].type, "integer");
  EXPECT_EQ(docs[0].default_value, "1000");
  EXPECT_EQ(docs[0].help, "Number of optimizer steps");
  EXPECT_EQ(docs[8].key, "train.source");
  EXPECT_EQ(docs[8].type, "one of synthetic|tokens|text");
  EXPECT_EQ(docs[8].default_value, "\"synthetic\"");
  EXPECT_EQ(docs[9].key, "train.tasks");
  EXPECT_EQ(docs[9].type, "block");
  EXPECT_EQ(docs[10].key, "train.tasks.copy");
  EXPECT_EQ(docs[10].default_value, "1.0");
}

TEST(EditDistanceTest, Distances) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("steps", "steps"), 0u);
  EXPECT_EQ(EditDistance("stpes", "steps"), 1u) << "a transposition is one edit";
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("lr", "lrr"), 1u);
}

TEST(EditDistanceTest, NearestMatch) {
  std::vector<std::string> keys = {"train.steps", "train.lr", "train.seed"};
  EXPECT_EQ(NearestMatch("train.stpes", keys), "train.steps");
  EXPECT_EQ(NearestMatch("train.sed", keys), "train.seed");
  EXPECT_EQ(NearestMatch("model.hidden", keys), std::nullopt);
  EXPECT_EQ(NearestMatch("x", std::vector<std::string>{}), std::nullopt);
}

}  // namespace
}  // namespace sy
