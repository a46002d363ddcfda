// JinjaTemplate: the subset of Jinja2 that Hugging Face chat templates are written in, enough to
// render the chat_template of a tokenizer_config.json (inference/chat_template.h) the way
// transformers' apply_chat_template does.
//
// The environment is transformers': trim_blocks and lstrip_blocks on (a newline right after a
// block tag is dropped, and the spaces before a block tag that starts a line), `{%-`/`-%}`
// whitespace control, break/continue, and the sandbox's Python-like values. Supported:
//   statements   if/elif/else, for (with `else`, an `if` filter, `k, v` unpacking, loop.index,
//                index0, revindex, revindex0, first, last, length, previtem, nextitem),
//                set (a name, `ns.attr`, or a block), break, continue, raw, generation (its body
//                rendered as is), comments
//   expressions  literals (strings, ints, floats, true/false/none in either case, lists, dicts,
//                tuples), names, .attr and [index] (a missing key is undefined), Python slices,
//                not/and/or, == != < <= > >=, in / not in, + - * / // % ** ~, `a if c else b`,
//                unary -
//   calls        raise_exception(msg), namespace(k=v...), range(...), strftime_now(fmt); string
//                methods strip/lstrip/rstrip([chars]), split([sep[, max]]), startswith, endswith,
//                upper, lower, title, capitalize, replace, count, find, join; dict methods items,
//                keys, values, get
//   filters      length/count, tojson([indent]) (Python's json.dumps with ensure_ascii off, as
//                transformers' own), trim, string, lower, upper, title, capitalize, replace, join,
//                first, last, default/d, list, reverse, unique, safe, int, float, abs, items,
//                dictsort, map(attribute=...), selectattr/rejectattr(attr[, test[, arg]]), indent
//   tests        defined, undefined, none, string, number, integer, float, boolean, true, false,
//                mapping, sequence, iterable, odd, even, divisibleby, eq/equalto/==, ne, in
// Anything else is refused: Parse says which tag or token it does not know, Render which filter,
// test, method or operation (InvalidArgument, with the template line). raise_exception's message
// comes back as InvalidArgument too.
//
// Values are JSON values (nlohmann::ordered_json, so objects keep their keys' order as Python
// dicts do) plus Jinja's undefined: printing it gives "", testing it gives false, and an attribute
// of it is an error. Printing follows Python: True/False/None, 1.0 for a float, lists and dicts in
// repr form.
//
// Bounds: a template comes from a model directory, but rendering is still bounded: at most
// kMaxOutputBytes of output, kMaxLoopIterations loop iterations and kMaxDepth nested expressions
// or statements, past which Render (or Parse) returns ResourceExhausted / InvalidArgument.
//
// Ownership: a parsed template is immutable; copies share it. Thread-safety: Render is const and
// safe from several threads at once.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

class JinjaTemplate {
 public:
  static constexpr size_t kMaxOutputBytes = 16u << 20;
  static constexpr int64_t kMaxLoopIterations = 1'000'000;
  static constexpr int kMaxDepth = 200;

  // InvalidArgument naming the line and what is wrong.
  static Result<JinjaTemplate> Parse(std::string_view source);

  // Renders with `context` (an object: its keys are the template's variables).
  Result<std::string> Render(const nlohmann::ordered_json& context) const;

  struct Program;  // the parsed template (jinja_template.cc)

 private:
  explicit JinjaTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace sy
