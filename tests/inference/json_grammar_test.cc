// inference/json_grammar.h and inference/token_constraint.h: what the JSON grammars accept and
// refuse, byte by byte; the schema keywords refused by name; and the token mask's walk over the
// sorted vocabulary against checking every token on its own.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "inference/json_grammar.h"
#include "inference/token_constraint.h"
#include "tests/inference/list_tokenizer.h"

namespace sy {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> Schema(const std::string& text) {
  Result<Grammar> g = Grammar::FromJsonSchema(json::parse(text));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::make_shared<const Grammar>(std::move(g).value());
}

// Whether the whole of `text` is a value of the grammar.
bool Accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AdvanceAll(text) && m.can_end();
}

TEST(JsonGrammarTest, AnyObjectAcceptsJsonObjectsOnly) {
  auto g = std::make_shared<const Grammar>(Grammar::AnyJsonObject());
  for (const char* ok :
       {"{}", "{ }", R"({"a":1})", R"({"a": [1, 2.5e3, -0, -12.75E-2, true, false, null]})",
        "{\n  \"x\": {\"y\": \"caf\xC3\xA9 \\u00e9 \\n \\\" \\\\\"},\n  \"z\": []\n}",
        R"({"":{"":{"":[[[]]]}}})"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad :
       {"[]", "\"a\"", "1", R"({"a" 1})", "{a:1}", R"({"a":01})", R"({"a":1,})", R"({"a":.5})",
        R"({"a":1} )", R"({"a":1}{})", R"({"a":tru})", "{\"a\":\"\x01\"}", R"({"a":"\x"})",
        R"({'a':1})", "{\"a\":\"\xC3\"}", "{  }", "{\n                      }", "{\r}"}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AdvanceAll(R"({"a":1)"));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.Advance('}'));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.Advance(' '));  // nothing after the object
}

TEST(JsonGrammarTest, ObjectSchemaTakesItsPropertiesInOrder) {
  auto g = Schema(R"({"type": "object", "additionalProperties": false,
      "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                     "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
      "required": ["name", "age"]})");
  for (const char* ok :
       {R"({"name":"x","age":3})", R"({ "name" : "" , "age" : -40 })",
        R"({"name":"x","age":3,"tags":[]})", R"({"name":"x","age":0,"tags":["a","b"]})"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad :
       {R"({"name":"x"})", R"({"age":3,"name":"x"})", R"({"name":"x","age":3.5})",
        R"({"name":"x","age":3,"other":1})", R"({"name":"x","age":3,"tags":["c"]})",
        R"({"name":"x","age":3,"tags":["a","b","a"]})", R"({"name":1,"age":3})", R"({})"}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
}

TEST(JsonGrammarTest, OptionalPropertiesTakeTheirCommasRight) {
  auto g = Schema(R"({"properties": {"a": {"type": "null"}, "b": {"type": "boolean"},
                                     "c": {"const": 7}}, "required": ["c"]})");
  for (const char* ok : {R"({"c":7})", R"({"a":null,"c":7})", R"({"b":true,"c":7})",
                         R"({"a":null,"b":false,"c":7})"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad : {R"({,"c":7})", R"({"a":null,,"c":7})", R"({"c":8})", R"({"a":null})"}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
}

TEST(JsonGrammarTest, RefsRecurseAndUnionsChoose) {
  auto tree = Schema(R"({"$defs": {"node": {"type": "object", "required": ["v", "kids"],
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
                                                        "items": {"$ref": "#/$defs/node"}}}}},
      "$ref": "#/$defs/node"})");
  EXPECT_TRUE(
      Accepts(tree, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(Accepts(tree, R"({"v":1,"kids":[{"v":2}]})"));
  auto typed_enum = Schema(R"({"enum": ["a", null], "type": ["string", "null"], "title": "t"})");
  EXPECT_TRUE(Accepts(typed_enum, "null"));
  EXPECT_TRUE(Accepts(typed_enum, R"("a")"));
  auto maybe = Schema(R"({"type": ["string", "null"]})");
  EXPECT_TRUE(Accepts(maybe, "null"));
  EXPECT_TRUE(Accepts(maybe, R"("x")"));
  EXPECT_FALSE(Accepts(maybe, "1"));
  auto any_of = Schema(R"({"anyOf": [{"type": "integer"}, {"type": "array", "minItems": 1,
                                                             "items": {"type": "number"}}]})");
  EXPECT_TRUE(Accepts(any_of, "12"));
  EXPECT_TRUE(Accepts(any_of, "[1.5]"));
  EXPECT_FALSE(Accepts(any_of, "[]"));
  auto map = Schema(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(Accepts(map, R"({"x":1,"y":2})"));
  EXPECT_FALSE(Accepts(map, R"({"x":"1"})"));
}

TEST(JsonGrammarTest, LengthsCountCharactersAndBoundsHold) {
  auto g = Schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(Accepts(g, "\"\xC3\xA9\xC3\xA9\""));  // two characters, four bytes
  EXPECT_TRUE(Accepts(g, R"("abc")"));
  EXPECT_TRUE(Accepts(g, R"("a\n")"));
  EXPECT_FALSE(Accepts(g, R"("a")"));
  EXPECT_FALSE(Accepts(g, R"("abcd")"));
  auto number = Schema(R"({"type": "number"})");
  EXPECT_TRUE(Accepts(number, "12345678901234567"));  // 17 digits
  EXPECT_FALSE(Accepts(number, "123456789012345678"));
  EXPECT_FALSE(Accepts(number, "1e1234"));
}

TEST(JsonGrammarTest, UnsupportedKeywordsAreRefusedByName) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "^a"})", "schema: 'pattern' is not supported"},
      {R"({"type": "string", "format": "date"})", "schema: 'format' is not supported"},
      {R"({"properties": {"n": {"type": "integer", "minimum": 0}}})",
       "schema.properties.n: 'minimum' is not supported"},
      {R"({"allOf": [{"type": "string"}, {"type": "null"}]})", "'allOf' is supported with one"},
      {R"({"$ref": "#/$defs/missing"})", "names no schema of this one"},
      {R"({"properties": {"a": {}}, "required": ["b"]})", "'required' names \"b\""},
      {R"({"type": "tuple"})", "is not a JSON Schema type"},
      {R"({"type": "array", "maxItems": 100000})", "'maxItems' = 100000 must be an integer"},
      {"false", "accepts no value"},
      {R"({"$ref": "#/$defs/a", "type": "object", "$defs": {"a": {}}})",
       "'type' beside '$ref' is not supported"},
      {R"({"anyOf": [{"type": "string"}], "maxLength": 3})", "'maxLength' beside 'anyOf'"},
      {R"({"enum": ["a", 1], "type": "string"})", "the value 1 is not of 'type' \"string\""},
  };
  for (const auto& [schema, message] : cases) {
    Result<Grammar> g = Grammar::FromJsonSchema(json::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(message), std::string::npos) << g.status().message();
  }
}

TEST(JsonGrammarTest, HostileSchemasAreBounded) {
  // An enum of 100000 strings compiles to too many symbols: refused, not built.
  json big = json::object();
  big["enum"] = json::array();
  for (int i = 0; i < 100000; ++i) big["enum"].push_back("value number " + std::to_string(i));
  Result<Grammar> g = Grammar::FromJsonSchema(big);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("too large"), std::string::npos) << g.status().message();
  // 70000 properties: more than a request may hold.
  std::string wide_text = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 70000; ++i) {
    wide_text +=
        (i ? ", " : "") + std::string("\"p") + std::to_string(i) + R"(": {"type": "null"})";
  }
  const json wide = json::parse(wide_text + "}}");
  g = Grammar::FromJsonSchema(wide);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("the schema is too large"), std::string::npos)
      << g.status().message();
  // Each level a choice between two references to the next, 25 levels: 2^25 ways to read a
  // string, matched along a bounded number of them (the grammar itself is small: $ref is shared).
  json chain = {{"$defs", json::object()}, {"$ref", "#/$defs/l0"}};
  for (int i = 0; i < 25; ++i) {
    const json next = {{"$ref", "#/$defs/l" + std::to_string(i + 1)}};
    chain["$defs"]["l" + std::to_string(i)] = {{"anyOf", json::array({next, next})}};
  }
  chain["$defs"]["l25"] = {{"type", "string"}};
  auto ambiguous =
      std::make_shared<const Grammar>(std::move(Grammar::FromJsonSchema(chain)).value());
  EXPECT_TRUE(Accepts(ambiguous, R"("still a string")"));
}

// Follows `target` (a value of `grammar`) through a constraint over random tokens of
// `alphabet`, checking every mask against each token matched on its own.
// Sets *restarts to how many times the constraint's state cache started over.
void FollowAndCheckEveryMask(const std::shared_ptr<const Grammar>& grammar,
                             const std::string& target, const std::string& alphabet,
                             int random_tokens = 3000, size_t max_states = 4096,
                             int64_t* restarts = nullptr) {
  // Random tokens, many sharing prefixes; the last one is the end token.
  std::mt19937 rng(7);
  std::vector<std::string> tokens;
  for (char c : alphabet) tokens.push_back(std::string(1, c));  // so that any target is spelled
  for (int i = 0; i < random_tokens; ++i) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    tokens.push_back(t);
  }
  tokens.push_back("");  // no bytes: takes no part
  const auto end = static_cast<int32_t>(tokens.size());
  tokens.push_back("<eos>");
  ListTokenizer tokenizer(tokens);
  auto vocab = ConstraintVocabulary::Build(tokenizer, static_cast<int64_t>(tokens.size()));
  ASSERT_TRUE(vocab.ok()) << vocab.status().ToString();
  GrammarConstraint constraint(grammar, *vocab, {end}, max_states);
  GrammarMatcher reference(grammar);
  // Follow the output, one of the admitted tokens at a time, checking every mask.
  size_t done = 0;
  while (true) {
    std::vector<float> logits(tokens.size(), 0.0f);
    constraint.Mask(logits);
    int admitted = 0;
    for (size_t id = 0; id < tokens.size(); ++id) {
      bool want;
      if (static_cast<int32_t>(id) == end) {
        want = reference.can_end();
      } else {
        GrammarMatcher copy = reference;
        want = !tokens[id].empty() && copy.AdvanceAll(tokens[id]);
      }
      ASSERT_EQ(std::isfinite(logits[id]), want)
          << "token '" << tokens[id] << "' after '" << target.substr(0, done) << "'";
      admitted += want ? 1 : 0;
    }
    ASSERT_GT(admitted, 0);
    if (done == target.size()) {
      EXPECT_TRUE(std::isfinite(logits[static_cast<size_t>(end)]));
      EXPECT_EQ(admitted, 1);  // the end token alone
      break;
    }
    // The longest admitted token that continues the target.
    int32_t pick = -1;
    for (size_t id = 0; id < tokens.size(); ++id) {
      if (!std::isfinite(logits[id]) || static_cast<int32_t>(id) == end) continue;
      if (target.compare(done, tokens[id].size(), tokens[id]) == 0 &&
          (pick < 0 || tokens[id].size() > tokens[static_cast<size_t>(pick)].size())) {
        pick = static_cast<int32_t>(id);
      }
    }
    ASSERT_GE(pick, 0) << "no admitted token continues the target at byte " << done;
    constraint.Accept(pick);
    ASSERT_TRUE(reference.AdvanceAll(tokens[static_cast<size_t>(pick)]));
    done += tokens[static_cast<size_t>(pick)].size();
  }
  EXPECT_TRUE(constraint.complete());
  if (restarts != nullptr) *restarts = constraint.cache_restarts();
}

TEST(TokenConstraintTest, TheSortedWalkMasksExactlyTheTokensTheGrammarAdmits) {
  FollowAndCheckEveryMask(std::make_shared<const Grammar>(Grammar::AnyJsonObject()),
                          R"({"a": [1, 2.5e3, true, null], "s": "x\"y", "n": {}})",
                          "{}[]\":, 0123456789.-eatrufnlsxy\\");
}

TEST(TokenConstraintTest, MasksStayExactWhenTheStateCacheStartsOver) {
  // An enum of 6000 random words: walking the vocabulary meets far more grammar states than a
  // cache of 64 keeps, so it starts over in the middle of walks.
  std::mt19937 rng(11);
  json words = json::array();
  for (int i = 0; i < 6000; ++i) {
    std::string w;
    for (int k = 0; k < 8; ++k) w += static_cast<char>('a' + rng() % 6);
    words.push_back(w);
  }
  const std::string target = words[1234].dump();
  int64_t restarts = 0;
  FollowAndCheckEveryMask(Schema(json{{"enum", words}}.dump()), target, "\"abcdef", 20000, 64,
                          &restarts);
  EXPECT_GT(restarts, 0);
}

}  // namespace
}  // namespace sy
