// JinjaTemplate (inference/jinja_template.h), the Jinja subset chat templates use: each construct
// on a small template whose output is worked out by hand from Jinja's rules (trim_blocks and
// lstrip_blocks on, as transformers sets them). The whole templates of the five families are
// checked against transformers itself by chat_template_oracle.py.
#include "inference/jinja_template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

namespace sy {
namespace {

using Json = nlohmann::ordered_json;

std::string Render(const std::string& source, const Json& context = Json::object()) {
  Result<JinjaTemplate> t = JinjaTemplate::Parse(source);
  if (!t.ok()) return "PARSE ERROR: " + t.status().ToString();
  Result<std::string> out = t->Render(context);
  if (!out.ok()) return "RENDER ERROR: " + out.status().ToString();
  return *out;
}

TEST(JinjaTemplateTest, TextOutputAndLiterals) {
  EXPECT_EQ(Render("plain"), "plain");
  EXPECT_EQ(Render("{{ 'a' + \"b\" }}{{ 1 + 2 }}{{ 7 // 2 }}{{ -7 // 2 }}{{ 7 % 3 }}"), "ab33-41");
  EXPECT_EQ(Render("{{ 1 / 2 }} {{ 2 * 3 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1.0 }}"),
            "0.5 6 1024 abab 1.0");
  EXPECT_EQ(Render("{{ true }} {{ none }} {{ [1, 'x'] }} {{ {'k': 2} }}"),
            "True None [1, 'x'] {'k': 2}");
  EXPECT_EQ(Render("{{ x }}|{{ x.y if x is defined else 'u' }}", Json::object()), "|u");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }}"), "a1None");
  EXPECT_EQ(Render("{# a comment #}x{{ 'it\\'s' }}"), "xit's");
}

TEST(JinjaTemplateTest, WhitespaceControlTrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before one.
  EXPECT_EQ(Render("{% if true %}\n  yes\n  {% endif %}\nafter"), "  yes\nafter");
  // '-' strips every whitespace on its side, newlines included; expression tags keep theirs.
  EXPECT_EQ(Render("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(Render("a\n{{ 'b' }}\nc"), "a\nb\nc");
  EXPECT_EQ(Render("x {%- if true %} y{% endif %}"), "x y");
  // A block tag after text on the same line keeps that line's spaces.
  EXPECT_EQ(Render("ab  {% if true %}c{% endif %}"), "ab  c");
  // {%+ turns lstrip off for its tag.
  EXPECT_EQ(Render("  {%+ if true %}c{% endif %}"), "  c");
}

TEST(JinjaTemplateTest, IfForSetAndLoopVariables) {
  const Json ctx = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index0 }}{{ x }}{% if not loop.last %},{% endif %}"
                   "{% endfor %}",
                   ctx),
            "0a,1b,2c");
  EXPECT_EQ(Render("{% for x in xs if x != 'b' %}{{ loop.index }}{{ x }}{{ loop.length }}"
                   "{% endfor %}",
                   ctx),
            "1a22c2");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if x == 'c' %}"
                   "{% break %}{% endif %}{{ x }}{% endfor %}",
                   ctx),
            "a");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  // A set inside a loop does not leak out of it; a namespace carries a value out.
  EXPECT_EQ(
      Render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in xs %}{% set n = n + 1 %}"
             "{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}",
             ctx),
      "0 3");
  EXPECT_EQ(Render("{% if 1 > 2 %}a{% elif 'b' in 'abc' %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(Render("{% set s %}inner {{ 1 }}{% endset %}[{{ s }}]"), "[inner 1]");
  EXPECT_EQ(Render("{% for x in xs[::-1] %}{{ x }}{% endfor %}{{ xs[1:] }}{{ xs[-1] }}", ctx),
            "cba['b', 'c']c");
}

TEST(JinjaTemplateTest, FiltersTestsAndMethods) {
  const Json ctx = {{"m", {{"role", "user"}, {"content", "  Hi\n"}}}, {"xs", {3, 1, 2}}};
  EXPECT_EQ(Render("{{ m.content | trim }}|{{ m['role'] | upper }}|{{ xs | length }}", ctx),
            "Hi|USER|3");
  EXPECT_EQ(Render("{{ m | tojson }}", ctx), R"({"role": "user", "content": "  Hi\n"})");
  EXPECT_EQ(Render("{{ {'a': [1, 2.5, none, true]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
  EXPECT_EQ(
      Render("{{ xs | join('-') }} {{ xs | first }} {{ xs | last }} {{ missing | default('d') }}",
             ctx),
      "3-1-2 3 2 d");
  EXPECT_EQ(Render("{{ m.content is string }}{{ m.nope is defined }}{{ none is none }}"
                   "{{ 3 is odd }}{{ xs is iterable }}{{ m is mapping }}{{ false is false }}",
                   ctx),
            "TrueFalseTrueTrueTrueTrueTrue");
  EXPECT_EQ(
      Render("{{ 'a</think>b'.split('</think>')[-1] }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}|"
             "{{ 'xyx'.strip('x') }}|{{ 'ab'.startswith('a') }}{{ 'ab'.endswith(('c', 'b')) }}"
             "|{{ 'a b  c'.split() }}|{{ 'aXbX'.replace('X', '-') }}"),
      "b|x\n|y|TrueTrue|['a', 'b', 'c']|a-b-");
  EXPECT_EQ(
      Render("{{ [{'n': 1, 'k': 'a'}, {'n': 0, 'k': 'b'}] | selectattr('n') | map(attribute='k')"
             " | list }}"),
      "['a']");
  EXPECT_EQ(Render("{{ d.get('x', 5) }}{{ d.get('y') }}", {{"d", {{"y", 1}}}}), "51");
}

TEST(JinjaTemplateTest, ErrorsAreStatusesNotCrashes) {
  EXPECT_NE(Render("{{ raise_exception('roles must alternate') }}").find("roles must alternate"),
            std::string::npos);
  EXPECT_NE(Render("{% if x %}never closed").find("endif %} is missing"), std::string::npos);
  EXPECT_NE(Render("{% frobnicate %}").find("unknown tag"), std::string::npos);
  EXPECT_NE(Render("{{ 'a' | nosuchfilter }}").find("unknown filter"), std::string::npos);
  EXPECT_NE(Render("{{ x.y }}").find("undefined value has no attribute"), std::string::npos);
  EXPECT_NE(Render("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(Render("{{ 'unclosed }}").find("never closed"), std::string::npos);
  EXPECT_NE(Render("{{ (((((1 ").find("ERROR"), std::string::npos);
  std::string deep = "{{ ";
  for (int i = 0; i < 500; ++i) deep += "(";
  deep += "1";
  for (int i = 0; i < 500; ++i) deep += ")";
  EXPECT_NE(Render(deep + " }}").find("too deeply"), std::string::npos);
  // Bounded: an endless-looking loop stops at the limit with ResourceExhausted.
  Result<JinjaTemplate> t = JinjaTemplate::Parse(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in "
      "range(10) %}x{% endfor %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(t.ok());
  Result<std::string> out = t->Render(Json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace sy
