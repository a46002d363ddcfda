// The request-body parsers of `switchyard serve` (launcher/serving/openai_request.h): what they
// take, with its defaults, and that every malformed or unsupported body is refused with a message
// naming the field, never accepted with a guess.
#include "launcher/serving/openai_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sy::serving {
namespace {

TEST(OpenAiRequestTest, CompletionWithTextPromptAndEveryField) {
  Result<CompletionRequest> r = ParseCompletionRequest(R"({
    "model": "tiny", "prompt": "Hello", "stream": true, "stream_options": {"include_usage": true},
    "max_tokens": 12, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": -3,
    "stop": ["\n\n", "User:"], "stop_token_ids": [2, 7], "ignore_eos": true, "user": "me",
    "n": 1, "echo": false, "logprobs": null, "presence_penalty": 0, "frequency_penalty": 0.0})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "tiny");
  ASSERT_TRUE(r->prompt_text.has_value());
  EXPECT_EQ(*r->prompt_text, "Hello");
  EXPECT_TRUE(r->prompt_ids.empty());
  const SamplingParams& p = r->params;
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.max_tokens, 12);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(p.stop, (std::vector<std::string>{"\n\n", "User:"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_TRUE(p.ignore_eos);
}

TEST(OpenAiRequestTest, DefaultsAreTheApis) {
  Result<CompletionRequest> r = ParseCompletionRequest(R"({"prompt": "x"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model, "");
  EXPECT_FALSE(r->params.stream);
  EXPECT_FALSE(r->params.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r->params.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r->params.top_p, 1.0f);
  EXPECT_EQ(r->params.top_k, 0);
  EXPECT_FALSE(r->params.seed.has_value());
  EXPECT_TRUE(r->params.stop.empty());
  // null is absent; a single stop string; top_k -1 is off.
  r = ParseCompletionRequest(R"({"prompt": "x", "max_tokens": null, "stop": "END", "top_k": -1})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->params.max_tokens.has_value());
  EXPECT_EQ(r->params.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(r->params.top_k, 0);
}

TEST(OpenAiRequestTest, PromptFormsOfTheApi) {
  for (const char* body : {R"({"prompt": [5, 0, 17]})", R"({"prompt": [[5, 0, 17]]})"}) {
    Result<CompletionRequest> r = ParseCompletionRequest(body);
    ASSERT_TRUE(r.ok()) << body << ": " << r.status().ToString();
    EXPECT_FALSE(r->prompt_text.has_value());
    EXPECT_EQ(r->prompt_ids, (std::vector<int32_t>{5, 0, 17}));
  }
  Result<CompletionRequest> r = ParseCompletionRequest(R"({"prompt": ["one text"]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt_text, "one text");
}

TEST(OpenAiRequestTest, ChatMessages) {
  Result<ChatRequest> r = ParseChatRequest(R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "Again", "name": "bob"}],
    "max_completion_tokens": 9})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "Hi there");
  EXPECT_EQ(r->messages[2].content, "");
  EXPECT_EQ(r->messages[3].content, "Again");
  EXPECT_EQ(r->params.max_tokens, 9);
}

// Each body must be refused, with a message containing `says`.
void ExpectRefused(bool chat, const std::string& body, const std::string& says) {
  const Status status =
      chat ? ParseChatRequest(body).status() : ParseCompletionRequest(body).status();
  ASSERT_FALSE(status.ok()) << body;
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << body;
  EXPECT_NE(status.message().find(says), std::string::npos)
      << body << " -> " << status.ToString() << " (wanted '" << says << "')";
}

TEST(OpenAiRequestTest, MalformedBodiesAreRefused) {
  ExpectRefused(false, "", "not valid JSON");
  ExpectRefused(false, "{\"prompt\": \"x\"", "not valid JSON");
  ExpectRefused(false, "[1, 2]", "must be a JSON object");
  ExpectRefused(false, "\"text\"", "must be a JSON object");
  ExpectRefused(false, R"({"prompt": "a", "prompt": "b"})", "twice");
  std::string deep = R"({"prompt": "x", "extra": )";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  ExpectRefused(false, deep + "}", "nests deeper");
  ExpectRefused(false, std::string(kMaxBodyBytes + 1, ' '), "the limit is");
}

TEST(OpenAiRequestTest, WrongTypesAndRangesAreRefused) {
  ExpectRefused(false, R"({})", "'prompt' is required");
  ExpectRefused(false, R"({"prompt": 5})", "'prompt' must be a string or an array");
  ExpectRefused(false, R"({"prompt": []})", "empty array");
  ExpectRefused(false, R"({"prompt": [1, -2]})", "not a token id");
  ExpectRefused(false, R"({"prompt": [1, 2147483648]})", "not a token id");
  ExpectRefused(false, R"({"prompt": [1, 2.5]})", "integers");
  ExpectRefused(false, R"({"prompt": [1, "a"]})", "integers");
  ExpectRefused(false, R"({"prompt": ["a", "b"]})", "one prompt per request");
  ExpectRefused(false, R"({"prompt": [[1], [2]]})", "one prompt per request");
  ExpectRefused(false, R"({"prompt": "x", "model": 3})", "'model' must be a string");
  ExpectRefused(false, R"({"prompt": "x", "stream": "yes"})", "'stream' must be true or false");
  ExpectRefused(false, R"({"prompt": "x", "stream_options": 1})", "'stream_options' must be");
  ExpectRefused(false, R"({"prompt": "x", "max_tokens": "8"})", "'max_tokens' must be an integer");
  ExpectRefused(false, R"({"prompt": "x", "max_tokens": 8.5})", "'max_tokens' must be an integer");
  ExpectRefused(false, R"({"prompt": "x", "max_tokens": 0})", "'max_tokens' is 0");
  ExpectRefused(false, R"({"prompt": "x", "max_tokens": 1000000000000})", "'max_tokens' is");
  ExpectRefused(false, R"({"prompt": "x", "max_tokens": 18446744073709551615})", "out of range");
  ExpectRefused(false, R"({"prompt": "x", "temperature": 2.5})", "'temperature' is 2.5");
  ExpectRefused(false, R"({"prompt": "x", "temperature": "hot"})",
                "'temperature' must be a number");
  ExpectRefused(false, R"({"prompt": "x", "top_p": 0})", "'top_p' is 0");
  ExpectRefused(false, R"({"prompt": "x", "top_p": 1.5})", "'top_p' is 1.5");
  // Issue 46, finding 9: a value that underflows f32 is named as sent, not as "0.000000".
  ExpectRefused(false, R"({"prompt": "x", "top_p": 1e-300})",
                "'top_p' is 1e-300, which is 0 in single precision");
  ExpectRefused(false, R"({"prompt": "x", "top_k": -2})", "'top_k' is -2");
  ExpectRefused(false, R"({"prompt": "x", "seed": 1.5})", "'seed' must be an integer");
  ExpectRefused(false, R"({"prompt": "x", "stop": 5})", "'stop' must be a string or an array");
  ExpectRefused(false, R"({"prompt": "x", "stop": ["a", 1]})", "'stop' must be");
  ExpectRefused(false, R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "at most 4");
  ExpectRefused(false, R"({"prompt": "x", "stop": [""]})", "1 to 1024 bytes");
  ExpectRefused(false, R"({"prompt": "x", "stop_token_ids": [-1]})", "not a token id");
  ExpectRefused(false, R"({"prompt": "x", "ignore_eos": 1})", "'ignore_eos' must be");
}

TEST(OpenAiRequestTest, UnsupportedOptionsAreRefusedNotIgnored) {
  ExpectRefused(false, R"({"prompt": "x", "n": 17})", "'n' is 17; it must be in [1, 16]");
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x", "n": 3})")->params.n, 3);
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x"})")->params.n, 1);
  ExpectRefused(false, R"({"prompt": "x", "best_of": 3})", "'best_of'");
  ExpectRefused(false, R"({"prompt": "x", "echo": true})", "'echo'");
  ExpectRefused(false, R"({"prompt": "x", "suffix": "end"})", "'suffix'");
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x", "logit_bias": {"5": 10, "7": -100}})")
                ->params.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, 10.0f}, {7, -100.0f}}));
  ExpectRefused(false, R"({"prompt": "x", "logit_bias": {"x": 10}})", "not a token id");
  ExpectRefused(false, R"({"prompt": "x", "logit_bias": {"5": 200}})", "[-100, 100]");
  ExpectRefused(false, R"({"prompt": "x", "logit_bias": [5]})", "'logit_bias' must be");
  ExpectRefused(false, R"({"prompt": "x", "tools": [{}]})", "'tools'");
  // Issue 46, finding 9: fields this server does not know are refused by name, not ignored.
  for (const char* field : {"typical_p", "mirostat", "guided_json", "unknown_field"}) {
    ExpectRefused(false, std::string(R"({"prompt": "x", ")") + field + R"(": 1})",
                  std::string("the field \"") + field + "\" is not supported by this server");
    ExpectRefused(
        true,
        std::string(R"({"messages": [{"role": "user", "content": "x"}], ")") + field + R"(": 1})",
        std::string("the field \"") + field + "\" is not supported by this server");
  }
  // Each endpoint's own fields only.
  ExpectRefused(false, R"({"prompt": "x", "messages": []})", "the field \"messages\"");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}], "prompt": "x"})",
                "the field \"prompt\"");
  // Their neutral values pass.
  EXPECT_TRUE(ParseCompletionRequest(R"({"prompt": "x", "logprobs": 0, "n": 1, "best_of": 1,
                                         "suffix": ""})")
                  .ok());
  EXPECT_TRUE(ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}],
                                   "logprobs": false, "tools": [],
                                   "response_format": {"type": "text"}})")
                  .ok());
}

TEST(OpenAiRequestTest, ResponseFormatCompilesItsSchemaInTheBodysOrder) {
  auto chat = [](const std::string& format) {
    return ParseChatRequest(
        R"({"messages": [{"role": "user", "content": "x"}], "response_format": )" + format + "}");
  };
  EXPECT_EQ(chat(R"({"type": "text"})")->params.grammar, nullptr);
  ASSERT_NE(chat(R"({"type": "json_object"})")->params.grammar, nullptr);
  // "b" before "a", as the body gives them (a JSON object's members would sort them).
  Result<ChatRequest> r =
      chat(R"({"type": "json_schema", "json_schema": {"name": "x", "strict": true,
      "schema": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "null"}},
                 "required": ["b", "a"], "additionalProperties": false}}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  GrammarMatcher in_order(r->params.grammar), sorted(r->params.grammar);
  EXPECT_TRUE(in_order.AdvanceAll(R"({"b":1,"a":null})") && in_order.can_end());
  EXPECT_FALSE(sorted.AdvanceAll(R"({"a":null,"b":1})"));
  // The same for a completion.
  EXPECT_NE(ParseCompletionRequest(R"({"prompt": "x", "response_format": {"type": "json_object"}})")
                ->params.grammar,
            nullptr);
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                            "schema": {"type": "string", "pattern": "a+"}}}})",
                "'response_format.json_schema': schema: 'pattern' is not supported");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "yaml"}})",
                "'response_format.type' = \"yaml\"");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "json_schema"}})",
                "must be an object with a 'schema'");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "json_object", "schema": {}}})",
                "'response_format.schema' is not supported");
  // A schema of more names than kMaxSchemaMembers is refused before it is read in order.
  std::string many = R"({"type": "object", "properties": {)";
  for (size_t i = 0; i <= kMaxSchemaMembers; ++i) {
    many += (i ? ", " : "") + std::string("\"p") + std::to_string(i) + R"(": {})";
  }
  ExpectRefused(true,
                R"({"messages": [{"role": "user", "content": "x"}], "response_format":
                          {"type": "json_schema", "json_schema": {"schema": )" +
                    many + "}}}}}",
                "holds more than 4096 names");
}

TEST(OpenAiRequestTest, ToolsKeepTheirOrderAndToolChoiceNamesOneOfThem) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "get_weather",
      "description": "Weather", "parameters": {"type": "object", "properties": {"city":
      {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}}])";
  Result<ChatRequest> r =
      ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], )" + tools + "}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tool_choice.kind, ToolChoice::kAuto);
  // The body's order ("type" before "function"; "city" before "unit"), not sorted.
  EXPECT_EQ(r->tools.dump().substr(0, 40), R"([{"type":"function","function":{"name":")");
  EXPECT_LT(r->tools.dump().find("city"), r->tools.dump().find("unit"));
  r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice":
      {"type": "function", "function": {"name": "get_weather"}}, )" +
                       tools + "}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tool_choice.kind, ToolChoice::kNamed);
  EXPECT_EQ(r->tool_choice.name, "get_weather");
  EXPECT_EQ(ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice":
                                 "none", )" +
                             tools + "}")
                ->tool_choice.kind,
            ToolChoice::kNone);
  ExpectRefused(true,
                R"({"messages": [{"role": "user", "content": "x"}], "tool_choice":
      {"type": "function", "function": {"name": "other"}}, )" +
                    tools + "}",
                "names the function \"other\", which 'tools' does not hold");
  ExpectRefused(true,
                R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
                "'tools' is empty");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "maybe"})",
                "not one of none, auto, required");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "a b"}}]})",
                "tools[0].function.name must be 1 to 64 letters");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "returns": {}}}]})",
                "tools[0].function.returns is not supported");
  // A conversation with a call and its result: the fields reach the template.
  r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "refusal": null, "tool_calls": [{"id": "c1",
       "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "5 C"}], )" +
                       tools + "}");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->messages[1].fields["tool_calls"][0]["function"]["arguments"], R"({"city": "Oslo"})");
  EXPECT_EQ(r->messages[2].fields["tool_call_id"], "c1");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]})",
                "messages[0].tool_call_id is not supported in a user message");
}

TEST(OpenAiRequestTest, BadChatsAreRefused) {
  ExpectRefused(true, R"({})", "'messages' is required");
  ExpectRefused(true, R"({"messages": {}})", "'messages' must be an array");
  ExpectRefused(true, R"({"messages": []})", "1 to 4096 messages");
  ExpectRefused(true, R"({"messages": ["hi"]})", "'messages[0]' must be an object");
  ExpectRefused(true, R"({"messages": [{"content": "hi"}]})", "needs a \"role\" string");
  ExpectRefused(true, R"({"messages": [{"role": "wizard", "content": "hi"}]})", "'wizard'");
  ExpectRefused(true, R"({"messages": [{"role": "user"}]})", "needs a \"content\"");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": 5}]})",
                "'messages[0].content' must be");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                "text only");
  ExpectRefused(true, R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
                "without a \"text\" string");
}

TEST(OpenAiRequestTest, PenaltiesAndMinPAreTakenWithinTheirRanges) {
  Result<CompletionRequest> r = ParseCompletionRequest(
      R"({"prompt": "x", "min_p": 0.05, "repetition_penalty": 1.3, "presence_penalty": -0.5,
          "frequency_penalty": 2})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FLOAT_EQ(r->params.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->params.repetition_penalty, 1.3f);
  EXPECT_FLOAT_EQ(r->params.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r->params.frequency_penalty, 2.0f);
  Result<CompletionRequest> defaults = ParseCompletionRequest(R"({"prompt": "x"})");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->params.min_p, 0.0f);
  EXPECT_EQ(defaults->params.repetition_penalty, 1.0f);
  EXPECT_EQ(defaults->params.presence_penalty, 0.0f);
  EXPECT_EQ(defaults->params.frequency_penalty, 0.0f);
  ExpectRefused(false, R"({"prompt": "x", "min_p": 1.5})", "'min_p' is 1.5");
  ExpectRefused(false, R"({"prompt": "x", "repetition_penalty": 0})", "'repetition_penalty' is 0");
  ExpectRefused(false, R"({"prompt": "x", "presence_penalty": 3})", "'presence_penalty' is 3");
  ExpectRefused(true,
                R"({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": -2.5})",
                "'frequency_penalty' is -2.5");
}

TEST(OpenAiRequestTest, LogprobsAreACountInACompletionAndAFlagInAChat) {
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x"})")->params.logprobs, -1);
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x", "logprobs": 0})")->params.logprobs, 0);
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x", "logprobs": 5})")->params.logprobs, 5);
  EXPECT_EQ(ParseCompletionRequest(R"({"prompt": "x", "logprobs": false})")->params.logprobs, -1);
  ExpectRefused(false, R"({"prompt": "x", "logprobs": 21})", "'logprobs' is 21");
  ExpectRefused(false, R"({"prompt": "x", "logprobs": 2, "top_logprobs": 2})", "chat field");
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(ParseChatRequest(chat + R"("logprobs": true})")->params.logprobs, 0);
  EXPECT_EQ(ParseChatRequest(chat + R"("logprobs": true, "top_logprobs": 3})")->params.logprobs, 3);
  EXPECT_EQ(ParseChatRequest(chat + R"("logprobs": false})")->params.logprobs, -1);
  ExpectRefused(true, chat + R"("top_logprobs": 3})", "needs 'logprobs': true");
  ExpectRefused(true, chat + R"("logprobs": true, "top_logprobs": 30})", "'top_logprobs' is 30");
  ExpectRefused(true, chat + R"("logprobs": 2})", "'logprobs' must be true or false");
}

TEST(OpenAiRequestTest, TokenizeTakesATextOrAChatAndDetokenizeIds) {
  Result<TokenizeRequest> text = ParseTokenizeRequest(R"({"model": "m", "prompt": "Hello"})");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->model, "m");
  EXPECT_EQ(text->prompt, "Hello");
  EXPECT_TRUE(text->messages.empty());
  Result<TokenizeRequest> chat = ParseTokenizeRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false})");
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  EXPECT_FALSE(chat->prompt.has_value());
  ASSERT_EQ(chat->messages.size(), 1u);
  EXPECT_EQ(chat->messages[0].content, "hi");
  EXPECT_FALSE(chat->add_generation_prompt);
  EXPECT_TRUE(ParseTokenizeRequest(R"({"messages": [{"role": "user", "content": "hi"}]})")
                  ->add_generation_prompt);
  for (const char* bad : {R"({})", R"({"prompt": "x", "messages": []})", R"({"prompt": 5})",
                          R"({"prompt": "x", "add_special_tokens": true})",
                          R"({"messages": [{"role": "wizard", "content": "x"}]})"}) {
    EXPECT_FALSE(ParseTokenizeRequest(bad).ok()) << bad;
  }
  Result<DetokenizeRequest> ids = ParseDetokenizeRequest(R"({"tokens": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->tokens, (std::vector<int32_t>{1, 2, 3}));
  for (const char* bad : {R"({})", R"({"tokens": "1,2"})", R"({"tokens": [-1]})",
                          R"({"tokens": [1.5]})", R"({"tokens": [1], "prompt": "x"})"}) {
    EXPECT_FALSE(ParseDetokenizeRequest(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace sy::serving
