// inference/tool_calls.h: <tool_call> blocks read back as vLLM's hermes parser reads them, and the
// grammar of one call of the given functions.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "inference/tool_calls.h"

namespace sy {
namespace {

TEST(ToolCallsTest, BlocksBecomeCallsAndTheRestIsTheContent) {
  ParsedToolCalls p = ParseHermesToolCalls(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(p.calls[0].arguments),
            nlohmann::json::parse(R"({"city": "Oslo", "days": 2})"));
  EXPECT_EQ(p.calls[1].name, "now");
  EXPECT_EQ(p.calls[1].arguments, "{}");
  // parallel_tool_calls false: the first call only.
  p = ParseHermesToolCalls(
      "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>", 1);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.content, "");
}

TEST(ToolCallsTest, WhatIsNotACallStaysText) {
  ParsedToolCalls p = ParseHermesToolCalls("A <tool_call>not json</tool_call> B");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "A <tool_call>not json</tool_call> B");
  p = ParseHermesToolCalls("<tool_call>{\"arguments\": {}}</tool_call>");  // no name
  EXPECT_TRUE(p.calls.empty());
  p = ParseHermesToolCalls("plain answer");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "plain answer");
  // An answer cut after its call's JSON, before the closing tag, still holds the call.
  p = ParseHermesToolCalls("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.content, "");
}

TEST(ToolCallsTest, TheGrammarWritesOneCallOfTheFunctions) {
  Result<Grammar> g = HermesToolCallGrammar(
      {{"get_weather", nlohmann::ordered_json::parse(
                           R"({"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"], "additionalProperties": false})")},
       {"now", nullptr}});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto grammar = std::make_shared<const Grammar>(std::move(g).value());
  auto accepts = [&](const std::string& text) {
    GrammarMatcher m(grammar);
    return m.AdvanceAll(text) && m.can_end();
  };
  EXPECT_TRUE(
      accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
              "\"Oslo\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts("<tool_call>\n{\"name\": \"later\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(
      accepts("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": "
              "\"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts("Sure! <tool_call>"));
  // Parsing what the grammar writes gives the call back.
  ParsedToolCalls p = ParseHermesToolCalls(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");
  Result<Grammar> bad = HermesToolCallGrammar(
      {{"f", nlohmann::ordered_json::parse(R"({"type": "string", "format": "email"})")}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("the parameters of f: 'format' is not supported"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace sy
