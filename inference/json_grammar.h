// JSON grammars for constrained decoding: the OpenAI API's response_format {"type":
// "json_object"} (any JSON object) and {"type": "json_schema"} (a value that a JSON Schema
// accepts), compiled to a context-free grammar over bytes and matched a byte at a time, as
// llama.cpp's grammars (llama-grammar.cpp, json-schema-to-grammar) and vLLM's guided decoding do.
//
// Grammar: rules, each a list of alternatives, each a sequence of symbols: a byte set or a
// reference to a rule. Rules are right-recursive (no left recursion), so matching is a set of
// pushdown stacks (a stack per way the bytes so far may continue); a byte keeps the stacks whose
// next symbol admits it. What a model could stretch forever is bounded: whitespace between tokens
// is nothing, one space, or a line break and up to 20 spaces or tabs (as llama.cpp's JSON
// grammars); a number has at most 17 digits before the point, 16 after it and 3 in an exponent.
//
// The schema subset (docs/serving.md, "Structured output"): type (one or a list), properties
// (emitted in the order the schema lists them; those not in required may be left out),
// required, additionalProperties (false, or a schema when there are no properties: a map), items,
// minItems, maxItems, enum, const, anyOf, oneOf (as anyOf), allOf of one schema, $ref to
// #/$defs/NAME or #/definitions/NAME (recursion allowed), minLength and maxLength of strings, and
// the annotations (title, description, default, examples, ...). Any other keyword (pattern,
// format, minimum, ...) is refused by name, never ignored: an output that does not hold to the
// schema is not what the client asked for.
//
// Bounds, for schemas from untrusted requests: a schema holds at most 65536 schemas (each use of a
// shared one counted) and compiles to at most 2^18 symbols (InvalidArgument past either), and a
// matcher follows at most kMaxStacks ways at once; a schema so ambiguous that more stay open (anyOf
// of overlapping schemas, nested) is matched along the first kMaxStacks, which may reach a dead end
// (the constraint then lets the answer end).
//
// Ownership: values. Thread-safety: a Grammar is immutable once built (share it between
// matchers); a GrammarMatcher is not thread-safe.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/status.h"

namespace sy {

class Grammar {
 public:
  // A symbol: a byte set (rule < 0, `bytes`), or a reference to rule `rule`.
  struct Symbol {
    int32_t rule = -1;
    std::bitset<256> bytes;
  };
  using Sequence = std::vector<Symbol>;

  // Any JSON object (response_format json_object).
  static Grammar AnyJsonObject();
  // The values `schema` accepts (ordered_json: the properties keep the order the text gives
  // them); InvalidArgument naming the keyword and where it is
  // ("schema.properties.age: 'minimum' is not supported ...") for what the subset above lacks.
  static Result<Grammar> FromJsonSchema(const nlohmann::ordered_json& schema);
  // One of several values, each a value of its schema between two fixed texts (a tool call:
  // inference/tool_calls.h). Errors as FromJsonSchema's, with `where` naming the frame.
  struct Framed {
    std::string before;
    nlohmann::ordered_json schema;
    std::string after;
    std::string where;  // "tools[2].function.parameters"
  };
  static Result<Grammar> OneOfFramed(const std::vector<Framed>& frames);
  // The OpenAI API's response_format: null for {"type": "text"}, any JSON object for
  // {"type": "json_object"}, the schema's values for {"type": "json_schema", "json_schema":
  // {"name", "schema", "strict", "description"}}. InvalidArgument naming the field for any other
  // shape or member, and FromJsonSchema's errors. The server and the Python API both read it here.
  static Result<std::shared_ptr<const Grammar>> ForResponseFormat(
      const nlohmann::ordered_json& format);

  const std::vector<std::vector<Sequence>>& rules() const { return rules_; }
  int32_t root() const { return root_; }

 private:
  friend class GrammarBuilder;
  std::vector<std::vector<Sequence>> rules_;
  int32_t root_ = 0;
};

// Where matching stands: the ways the bytes so far can continue. Copyable (a copy is a
// checkpoint), cheap when the grammar is deterministic (one stack).
class GrammarMatcher {
 public:
  static constexpr size_t kMaxStacks = 256;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  // Feeds one byte; false (and no change) when no way admits it.
  bool Advance(uint8_t byte);
  // Feeds bytes; false (the state is then undefined: use a copy) when one is refused.
  bool AdvanceAll(std::string_view bytes);
  // The bytes so far are a whole value: the output may end here.
  bool can_end() const { return can_end_; }
  // No byte can follow: the output must end here.
  bool must_end() const { return stacks_.empty(); }
  // The state as bytes: two matchers of one grammar with the same key accept the same bytes from
  // here on (token_constraint.h caches transitions by it).
  std::string Key() const;

 private:
  // A position: the next symbol of alternative `alt` of rule `rule`, at `index`.
  struct Position {
    int32_t rule;
    int32_t alt;
    int32_t index;
    bool operator==(const Position&) const = default;
    bool operator<(const Position& o) const {
      return rule != o.rule ? rule < o.rule : alt != o.alt ? alt < o.alt : index < o.index;
    }
  };
  using Stack = std::vector<Position>;
  // Pushes `stack` expanded until its top is a byte set, onto `out` (or sets can_end when it
  // empties).
  void Expand(Stack stack, std::vector<Stack>* out, bool* can_end, int depth) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;  // each with a byte-set symbol on top, sorted, unique
  bool can_end_ = false;
};

}  // namespace sy
