#include "inference/json_grammar.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "runtime/core/check.h"

namespace sy {

using json = nlohmann::ordered_json;
using Symbol = Grammar::Symbol;
using Sequence = Grammar::Sequence;

namespace {

constexpr int kMaxIndent = 20;         // spaces or tabs after a line break
constexpr int kMaxIntegerDigits = 16;  // after the first
constexpr int kMaxFractionDigits = 16;
constexpr int kMaxExponentDigits = 3;
constexpr int64_t kMaxCount = 4096;  // minItems, maxItems, minLength, maxLength at most
// What a schema may compile to: a request body is untrusted, and a grammar's memory is its
// symbols (40 bytes each: 10 MiB at most).
constexpr size_t kMaxSymbols = size_t{1} << 18;
constexpr size_t kMaxNodes = 65536;  // schemas compiled, counting each use of a shared one

Symbol Bytes(uint8_t lo, uint8_t hi) {
  Symbol s;
  for (int b = lo; b <= hi; ++b) s.bytes.set(static_cast<size_t>(b));
  return s;
}
Symbol Byte(char c) { return Bytes(static_cast<uint8_t>(c), static_cast<uint8_t>(c)); }
Symbol OneOf(std::string_view chars) {
  Symbol s;
  for (char c : chars) s.bytes.set(static_cast<uint8_t>(c));
  return s;
}
Symbol Ref(int32_t rule) {
  Symbol s;
  s.rule = rule;
  return s;
}
Sequence Literal(std::string_view text) {
  Sequence seq;
  for (char c : text) seq.push_back(Byte(c));
  return seq;
}
Sequence Join(std::initializer_list<Sequence> parts) {
  Sequence seq;
  for (const Sequence& part : parts) seq.insert(seq.end(), part.begin(), part.end());
  return seq;
}

// The keywords that only annotate a schema.
const std::set<std::string>& Annotations() {
  static const std::set<std::string> kNames = {
      "title",   "description", "default",  "examples",  "$schema", "$id",        "$comment",
      "$anchor", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
  return kNames;
}

}  // namespace

// Builds the rules of a Grammar: the shared JSON pieces once each, and one rule per schema node.
class GrammarBuilder {
 public:
  int32_t NewRule() {
    grammar_.rules_.emplace_back();
    return static_cast<int32_t>(grammar_.rules_.size() - 1);
  }
  void Set(int32_t rule, std::vector<Sequence> alts) {
    for (const Sequence& seq : alts) symbols_ += seq.size() + 1;
    grammar_.rules_[static_cast<size_t>(rule)] = std::move(alts);
  }
  int32_t Rule(std::vector<Sequence> alts) {
    const int32_t rule = NewRule();
    Set(rule, std::move(alts));
    return rule;
  }

  // `item` between min and max times (max < 0: no bound), as right-recursive rules.
  int32_t Repeat(const Sequence& item, int64_t min, int64_t max) {
    Sequence seq;
    for (int64_t i = 0; i < min; ++i) seq.insert(seq.end(), item.begin(), item.end());
    if (max < 0) {
      const int32_t tail = NewRule();  // tail ::= item tail | ""
      Sequence more = item;
      more.push_back(Ref(tail));
      Set(tail, {more, {}});
      seq.push_back(Ref(tail));
    } else if (max > min) {
      int32_t optional = Rule({{}});  // optional_0 ::= ""
      for (int64_t k = 1; k <= max - min; ++k) {
        Sequence more = item;
        more.push_back(Ref(optional));
        optional = Rule({{}, more});  // optional_k ::= "" | item optional_{k-1}
      }
      seq.push_back(Ref(optional));
    }
    return Rule({seq});
  }

  // Between tokens: nothing, a space, or a line break and its indentation (as llama.cpp's JSON
  // grammars): a model that favours whitespace cannot fill its answer with it.
  int32_t Whitespace() {
    if (ws_ < 0) {
      const int32_t indent = Repeat({OneOf(" \t")}, 0, kMaxIndent);
      ws_ = Rule({{}, {Byte(' ')}, {Byte('\n'), Ref(indent)}});
    }
    return ws_;
  }
  int32_t Digits(int64_t min, int64_t max) { return Repeat({Bytes('0', '9')}, min, max); }
  int32_t Integer() {
    if (integer_ < 0) {
      const int32_t minus = Rule({{}, {Byte('-')}});
      const int32_t natural =
          Rule({{Byte('0')}, {Bytes('1', '9'), Ref(Digits(0, kMaxIntegerDigits))}});
      integer_ = Rule({{Ref(minus), Ref(natural)}});
    }
    return integer_;
  }
  int32_t Number() {
    if (number_ < 0) {
      const int32_t fraction = Rule({{}, {Byte('.'), Ref(Digits(1, kMaxFractionDigits))}});
      const int32_t sign = Rule({{}, {OneOf("+-")}});
      const int32_t exponent =
          Rule({{}, {OneOf("eE"), Ref(sign), Ref(Digits(1, kMaxExponentDigits))}});
      number_ = Rule({{Ref(Integer()), Ref(fraction), Ref(exponent)}});
    }
    return number_;
  }
  // One character of a string: an unescaped UTF-8 character or an escape.
  int32_t StringCharacter() {
    if (character_ < 0) {
      Symbol ascii = Bytes(0x20, 0x7F);
      ascii.bytes.reset('"');
      ascii.bytes.reset('\\');
      const Symbol tail = Bytes(0x80, 0xBF);
      Symbol hex = Bytes('0', '9');
      hex.bytes |= Bytes('a', 'f').bytes | Bytes('A', 'F').bytes;
      character_ = Rule({{ascii},
                         {Bytes(0xC2, 0xDF), tail},
                         {Bytes(0xE0, 0xEF), tail, tail},
                         {Bytes(0xF0, 0xF4), tail, tail, tail},
                         {Byte('\\'), OneOf("\"\\/bfnrt")},
                         {Byte('\\'), Byte('u'), hex, hex, hex, hex}});
    }
    return character_;
  }
  int32_t String(int64_t min = 0, int64_t max = -1) {
    if (min == 0 && max < 0 && string_ >= 0) return string_;
    const int32_t chars = Repeat({Ref(StringCharacter())}, min, max);
    const int32_t rule = Rule({{Byte('"'), Ref(chars), Byte('"')}});
    if (min == 0 && max < 0) string_ = rule;
    return rule;
  }
  // '[' ws ( ']' | item ws ( ',' ws item ws ){min-1, max-1} ']' ).
  int32_t Array(int32_t item, int64_t min, int64_t max) {
    const int32_t ws = Whitespace();
    std::vector<Sequence> body;
    if (min == 0) body.push_back({Byte(']')});
    if (max != 0) {
      const int32_t more = Repeat({Byte(','), Ref(ws), Ref(item), Ref(ws)},
                                  std::max<int64_t>(0, min - 1), max < 0 ? -1 : max - 1);
      body.push_back({Ref(item), Ref(ws), Ref(more), Byte(']')});
    }
    return Rule({{Byte('['), Ref(ws), Ref(Rule(std::move(body)))}});
  }
  // '{' ws ( '}' | key ws ':' ws value ws ( ',' ws key ws ':' ws value ws )* '}' ).
  int32_t Map(int32_t value) {
    const int32_t ws = Whitespace();
    const Sequence member = {Ref(String()), Ref(ws), Byte(':'), Ref(ws), Ref(value), Ref(ws)};
    const int32_t more = Repeat(Join({{Byte(','), Ref(ws)}, member}), 0, -1);
    const int32_t body = Rule({{Byte('}')}, Join({member, {Ref(more), Byte('}')}})});
    return Rule({{Byte('{'), Ref(ws), Ref(body)}});
  }
  // Any JSON value (and any object), made once.
  int32_t AnyValue() {
    if (value_ < 0) {
      value_ = NewRule();
      object_ = Map(value_);
      const int32_t array = Array(value_, 0, -1);
      Set(value_, {{Ref(object_)},
                   {Ref(array)},
                   {Ref(String())},
                   {Ref(Number())},
                   Literal("true"),
                   Literal("false"),
                   Literal("null")});
    }
    return value_;
  }
  int32_t AnyObject() {
    AnyValue();
    return object_;
  }

  // One of the sorted, distinct texts [begin, end), all sharing their first `depth` bytes, from
  // byte `depth` on: a trie, so that matching stays one way however many texts there are.
  int32_t Literals(const std::vector<std::string>& texts, size_t begin, size_t end, size_t depth) {
    std::vector<Sequence> alts;
    size_t i = begin;
    if (texts[i].size() == depth) {  // (sorted: the text that ends here comes first)
      alts.push_back({});
      ++i;
    }
    while (i < end) {
      const char byte = texts[i][depth];
      size_t j = i;
      while (j < end && texts[j][depth] == byte) ++j;
      alts.push_back({Byte(byte), Ref(Literals(texts, i, j, depth + 1))});
      i = j;
    }
    return Rule(std::move(alts));
  }

  Grammar Finish(int32_t root) {
    grammar_.root_ = root;
    return std::move(grammar_);
  }

  // ---- JSON Schema
  Result<int32_t> Schema(const json& root, const json& node, const std::string& where) {
    root_schema_ = &root;
    refs_.clear();  // "#/$defs/NAME" names a definition of this schema
    return Node(node, where);
  }

 private:
  // Whether `v` is of the JSON Schema type (or one of the types) `type`.
  static bool OfType(const json& v, const json& type) {
    if (type.is_array()) {
      for (const json& one : type) {
        if (OfType(v, one)) return true;
      }
      return false;
    }
    if (!type.is_string()) return false;
    const std::string t = type.get<std::string>();
    return (t == "string" && v.is_string()) || (t == "integer" && v.is_number_integer()) ||
           (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
           (t == "null" && v.is_null()) || (t == "array" && v.is_array()) ||
           (t == "object" && v.is_object());
  }

  Status Refuse(const std::string& where, const std::string& what) {
    return InvalidArgumentError(where + ": " + what);
  }

  Result<int64_t> Count(const json& node, const char* key, const std::string& where) {
    const json& v = node.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxCount) {
      return InvalidArgumentError(where + ": '" + key + "' = " + v.dump() +
                                  " must be an integer in [0, " + std::to_string(kMaxCount) + "]");
    }
    return v.get<int64_t>();
  }

  // (min, max) of a count pair (minLength/maxLength, minItems/maxItems); max -1: none.
  Result<std::pair<int64_t, int64_t>> Bounds(const json& node, const char* min_key,
                                             const char* max_key, const std::string& where) {
    int64_t lo = 0, hi = -1;
    if (node.contains(min_key)) {
      SY_ASSIGN_OR_RETURN(lo, Count(node, min_key, where));
    }
    if (node.contains(max_key)) {
      SY_ASSIGN_OR_RETURN(hi, Count(node, max_key, where));
    }
    if (hi >= 0 && hi < lo) {
      return Refuse(where, std::string(max_key) + " is below " + min_key);
    }
    return std::make_pair(lo, hi);
  }

  Result<int32_t> Node(const json& node, const std::string& where) {
    if (++depth_ > 64) return Refuse(where, "the schema nests deeper than 64 levels");
    if (++nodes_ > kMaxNodes) {
      return Refuse(where, "the schema is too large: more than " + std::to_string(kMaxNodes) +
                               " schemas in it");
    }
    Result<int32_t> rule = NodeBody(node, where);
    --depth_;
    if (rule.ok() && symbols_ > kMaxSymbols) {
      return Refuse(where, "the schema is too large: it compiles to more than " +
                               std::to_string(kMaxSymbols) + " grammar symbols");
    }
    return rule;
  }

  Result<int32_t> NodeBody(const json& node, const std::string& where) {
    if (node.is_boolean()) {
      if (node.get<bool>()) return AnyValue();
      return Refuse(where, "the schema false accepts no value");
    }
    if (!node.is_object()) return Refuse(where, "a schema must be an object, not " + node.dump());
    static const std::set<std::string> kKeywords = {
        "type",  "properties", "required", "additionalProperties",
        "items", "minItems",   "maxItems", "enum",
        "const", "anyOf",      "oneOf",    "allOf",
        "$ref",  "minLength",  "maxLength"};
    for (const auto& [key, value] : node.items()) {
      if (kKeywords.count(key) == 0 && Annotations().count(key) == 0) {
        return Refuse(where, "'" + key +
                                 "' is not supported in a response_format schema (docs/serving.md "
                                 "lists the keywords that are)");
      }
    }
    // A keyword that chooses the value outright ($ref, const, enum, anyOf, oneOf, allOf) takes no
    // other constraint beside it (only `type` beside const and enum, which their values must
    // match): one left unchecked would let through values the schema refuses.
    for (const char* main : {"$ref", "const", "enum", "anyOf", "oneOf", "allOf"}) {
      if (!node.contains(main)) continue;
      const bool typed = std::string_view(main) == "const" || std::string_view(main) == "enum";
      for (const auto& [key, value] : node.items()) {
        if (key == main || Annotations().count(key) > 0 || (typed && key == "type")) continue;
        return Refuse(where, "'" + key + "' beside '" + main + "' is not supported");
      }
      break;
    }
    if (node.contains("$ref")) return Reference(node.at("$ref"), where);
    if (node.contains("const") || node.contains("enum")) {
      const bool is_const = node.contains("const");
      const json values = is_const ? json::array({node.at("const")}) : node.at("enum");
      if (!values.is_array() || values.empty()) {
        return Refuse(where, "'enum' must be a non-empty array");
      }
      if (node.contains("type")) {
        const json& t = node.at("type");
        for (const json& v : values) {
          if (!OfType(v, t)) {
            return Refuse(where, "the value " + v.dump() + " is not of 'type' " + t.dump());
          }
        }
      }
      std::vector<std::string> texts;
      for (const json& v : values) texts.push_back(v.dump());
      std::sort(texts.begin(), texts.end());
      texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
      return Literals(texts, 0, texts.size(), 0);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!node.contains(key)) continue;
      const json& subs = node.at(key);
      if (!subs.is_array() || subs.empty()) {
        return Refuse(where, std::string("'") + key + "' must be a non-empty array");
      }
      std::vector<Sequence> alts;
      for (size_t i = 0; i < subs.size(); ++i) {
        SY_ASSIGN_OR_RETURN(int32_t sub,
                            Node(subs[i], where + "." + key + "[" + std::to_string(i) + "]"));
        alts.push_back({Ref(sub)});
      }
      return Rule(std::move(alts));
    }
    if (node.contains("allOf")) {
      const json& subs = node.at("allOf");
      if (!subs.is_array() || subs.size() != 1) {
        return Refuse(where, "'allOf' is supported with one schema only");
      }
      return Node(subs[0], where + ".allOf[0]");
    }
    std::vector<std::string> types;
    if (node.contains("type")) {
      const json& t = node.at("type");
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& one : t) {
          if (!one.is_string()) return Refuse(where, "'type' lists " + one.dump());
          types.push_back(one.get<std::string>());
        }
      } else {
        return Refuse(where, "'type' must be a string or a list of strings");
      }
    } else if (node.contains("properties") || node.contains("required") ||
               node.contains("additionalProperties")) {
      types.push_back("object");
    } else if (node.contains("items") || node.contains("minItems") || node.contains("maxItems")) {
      types.push_back("array");
    } else if (node.contains("minLength") || node.contains("maxLength")) {
      types.push_back("string");
    } else {
      return AnyValue();
    }
    std::vector<Sequence> alts;
    for (const std::string& type : types) {
      SY_ASSIGN_OR_RETURN(int32_t rule, Typed(node, type, where));
      alts.push_back({Ref(rule)});
    }
    return alts.size() == 1 ? alts[0][0].rule : Rule(std::move(alts));
  }

  Result<int32_t> Typed(const json& node, const std::string& type, const std::string& where) {
    if (type == "string") {
      SY_ASSIGN_OR_RETURN(const auto bounds, Bounds(node, "minLength", "maxLength", where));
      return String(bounds.first, bounds.second);
    }
    if (type == "number") return Number();
    if (type == "integer") return Integer();
    if (type == "boolean") return Rule({Literal("true"), Literal("false")});
    if (type == "null") return Rule({Literal("null")});
    if (type == "array") {
      SY_ASSIGN_OR_RETURN(const auto bounds, Bounds(node, "minItems", "maxItems", where));
      int32_t item = -1;
      if (node.contains("items")) {
        SY_ASSIGN_OR_RETURN(item, Node(node.at("items"), where + ".items"));
      } else {
        item = AnyValue();
      }
      return Array(item, bounds.first, bounds.second);
    }
    if (type == "object") return Object(node, where);
    return Refuse(where, "'type' = \"" + type + "\" is not a JSON Schema type");
  }

  Result<int32_t> Object(const json& node, const std::string& where) {
    static const json kNone = json::object();
    const json& properties = node.contains("properties") ? node.at("properties") : kNone;
    if (!properties.is_object()) return Refuse(where, "'properties' must be an object");
    // (An ordered_json object finds a key by walking its members: look names up here instead.)
    std::set<std::string> names;
    for (const auto& [name, sub] : properties.items()) names.insert(name);
    std::set<std::string> required;
    if (node.contains("required")) {
      const json& r = node.at("required");
      if (!r.is_array()) return Refuse(where, "'required' must be an array of names");
      for (const json& name : r) {
        if (!name.is_string() || names.count(name.get<std::string>()) == 0) {
          return Refuse(where, "'required' names " + name.dump() + ", which 'properties' lacks");
        }
        required.insert(name.get<std::string>());
      }
    }
    const json additional = node.value("additionalProperties", json(true));
    if (properties.empty()) {
      if (additional.is_object()) {
        SY_ASSIGN_OR_RETURN(int32_t value, Node(additional, where + ".additionalProperties"));
        return Map(value);
      }
      if (additional == json(false)) return Rule({Literal("{}")});
      return AnyObject();
    }
    if (!additional.is_boolean()) {
      return Refuse(where,
                    "'additionalProperties' as a schema beside 'properties' is not supported");
    }
    // The properties in the schema's order; each optional one may be left out. rest[i][p]: the
    // members from property i on, p = whether a member came before (a comma is then due).
    const int32_t ws = Whitespace();
    struct Member {
      std::string name;
      int32_t value;
      bool required;
    };
    std::vector<Member> members;
    for (const auto& [name, sub] : properties.items()) {
      SY_ASSIGN_OR_RETURN(int32_t value, Node(sub, where + ".properties." + name));
      members.push_back({name, value, required.count(name) > 0});
    }
    int32_t after[2] = {Rule({{}}), Rule({{}})};  // past the last property: ""
    for (size_t i = members.size(); i-- > 0;) {
      const Member& m = members[i];
      const Sequence text = Join(
          {Literal(json(m.name).dump()), {Ref(ws), Byte(':'), Ref(ws), Ref(m.value), Ref(ws)}});
      int32_t here[2];
      for (int prev = 0; prev < 2; ++prev) {
        Sequence take = prev ? Join({{Byte(','), Ref(ws)}, text}) : text;
        take.push_back(Ref(after[1]));
        std::vector<Sequence> alts = {take};
        if (!m.required) alts.push_back({Ref(after[prev])});
        here[prev] = Rule(std::move(alts));
      }
      after[0] = here[0];
      after[1] = here[1];
    }
    return Rule({{Byte('{'), Ref(ws), Ref(after[0]), Byte('}')}});
  }

  Result<int32_t> Reference(const json& ref, const std::string& where) {
    if (!ref.is_string()) return Refuse(where, "'$ref' must be a string");
    const std::string path = ref.get<std::string>();
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    std::string name;
    const json* defs = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (path.rfind(prefix, 0) == 0) {
        name = path.substr(std::string_view(prefix).size());
        const std::string key = std::string_view(prefix) == "#/$defs/" ? "$defs" : "definitions";
        if (root_schema_->contains(key)) defs = &root_schema_->at(key);
      }
    }
    if (path == "#") {
      const int32_t rule = NewRule();
      refs_[path] = rule;
      SY_ASSIGN_OR_RETURN(int32_t body, Node(*root_schema_, "schema"));
      Set(rule, {{Ref(body)}});
      return rule;
    }
    if (defs == nullptr || !defs->is_object() || !defs->contains(name)) {
      return Refuse(where, "'$ref' = \"" + path +
                               "\" names no schema of this one (#/$defs/NAME or "
                               "#/definitions/NAME)");
    }
    const int32_t rule = NewRule();  // set after its body: the body may refer back to it
    refs_[path] = rule;
    std::string at = "schema." + path.substr(2);  // #/$defs/NAME: schema.$defs.NAME
    std::replace(at.begin(), at.end(), '/', '.');
    SY_ASSIGN_OR_RETURN(int32_t body, Node(defs->at(name), at));
    Set(rule, {{Ref(body)}});
    return rule;
  }

  Grammar grammar_;
  int32_t ws_ = -1, integer_ = -1, number_ = -1, character_ = -1, string_ = -1, value_ = -1,
          object_ = -1;
  const json* root_schema_ = nullptr;
  std::map<std::string, int32_t> refs_;
  int depth_ = 0;
  size_t symbols_ = 0;
  size_t nodes_ = 0;
};

Grammar Grammar::AnyJsonObject() {
  GrammarBuilder builder;
  const int32_t object = builder.AnyObject();
  return builder.Finish(object);
}

Result<Grammar> Grammar::FromJsonSchema(const json& schema) {
  GrammarBuilder builder;
  SY_ASSIGN_OR_RETURN(int32_t root, builder.Schema(schema, schema, "schema"));
  return builder.Finish(root);
}

Result<Grammar> Grammar::OneOfFramed(const std::vector<Framed>& frames) {
  GrammarBuilder builder;
  std::vector<Sequence> alts;
  for (const Framed& frame : frames) {
    SY_ASSIGN_OR_RETURN(int32_t value, builder.Schema(frame.schema, frame.schema, frame.where));
    alts.push_back(Join({Literal(frame.before), {Ref(value)}, Literal(frame.after)}));
  }
  if (alts.empty()) return InvalidArgumentError("no value to choose from");
  return builder.Finish(builder.Rule(std::move(alts)));
}

Result<std::shared_ptr<const Grammar>> Grammar::ForResponseFormat(const json& format) {
  auto member = [](const json& object, const char* name) -> const json* {
    auto it = object.find(name);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  };
  if (!format.is_object() || member(format, "type") == nullptr || !format["type"].is_string()) {
    return InvalidArgumentError("'response_format' = " + format.dump() +
                                " must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                                "{\"type\": \"json_schema\", \"json_schema\": {...}}");
  }
  const std::string type = format["type"].get<std::string>();
  for (const auto& [name, value] : format.items()) {
    if (name != "type" && !(name == "json_schema" && type == "json_schema")) {
      return InvalidArgumentError("'response_format." + name + "' is not supported with type \"" +
                                  type + "\"");
    }
  }
  if (type == "text") return std::shared_ptr<const Grammar>();
  if (type == "json_object") {
    static const auto kAnyObject = std::make_shared<const Grammar>(AnyJsonObject());
    return kAnyObject;
  }
  if (type != "json_schema") {
    return InvalidArgumentError("'response_format.type' = \"" + type +
                                "\" is not one of text, json_object, json_schema");
  }
  const json* spec = member(format, "json_schema");
  if (spec == nullptr || !spec->is_object()) {
    return InvalidArgumentError("'response_format.json_schema' must be an object with a 'schema'");
  }
  for (const auto& [name, value] : spec->items()) {
    if (name != "name" && name != "schema" && name != "strict" && name != "description") {
      return InvalidArgumentError("'response_format.json_schema." + name +
                                  "' is not supported (name, schema, strict, description)");
    }
  }
  const json* schema = member(*spec, "schema");
  if (schema == nullptr) {
    return InvalidArgumentError("'response_format.json_schema.schema' is required");
  }
  Result<Grammar> grammar = FromJsonSchema(*schema);
  if (!grammar.ok()) return grammar.status().WithContext("'response_format.json_schema'");
  return std::make_shared<const Grammar>(std::move(grammar).value());
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  const auto& alts = grammar_->rules()[static_cast<size_t>(grammar_->root())];
  for (size_t a = 0; a < alts.size(); ++a) {
    Expand({{grammar_->root(), static_cast<int32_t>(a), 0}}, &stacks_, &can_end_, 0);
  }
  std::sort(stacks_.begin(), stacks_.end());
  stacks_.erase(std::unique(stacks_.begin(), stacks_.end()), stacks_.end());
}

void GrammarMatcher::Expand(Stack stack, std::vector<Stack>* out, bool* can_end, int depth) const {
  // Rules are right-recursive; a deeper chain of references without a byte is a builder bug.
  SY_CHECK(depth < 10000);
  if (out->size() >= kMaxStacks) return;  // a bounded number of ways (see the header)
  const auto& rules = grammar_->rules();
  while (true) {
    if (stack.empty()) {
      *can_end = true;
      return;
    }
    Position& top = stack.back();
    const Sequence& seq = rules[static_cast<size_t>(top.rule)][static_cast<size_t>(top.alt)];
    if (static_cast<size_t>(top.index) == seq.size()) {
      stack.pop_back();
      continue;
    }
    const Symbol& symbol = seq[static_cast<size_t>(top.index)];
    if (symbol.rule < 0) {
      out->push_back(std::move(stack));
      return;
    }
    // A reference: the caller goes on after it; a reference at the end of its sequence leaves
    // nothing to come back to (so repetition does not grow the stack).
    ++top.index;
    if (static_cast<size_t>(top.index) == seq.size()) stack.pop_back();
    const auto& alts = rules[static_cast<size_t>(symbol.rule)];
    for (size_t a = 0; a < alts.size(); ++a) {
      Stack next = stack;
      next.push_back({symbol.rule, static_cast<int32_t>(a), 0});
      Expand(std::move(next), out, can_end, depth + 1);
    }
    return;
  }
}

bool GrammarMatcher::Advance(uint8_t byte) {
  const auto& rules = grammar_->rules();
  std::vector<Stack> next;
  bool can_end = false;
  for (const Stack& stack : stacks_) {
    const Position& top = stack.back();
    const Symbol& symbol = rules[static_cast<size_t>(top.rule)][static_cast<size_t>(top.alt)]
                                [static_cast<size_t>(top.index)];
    if (!symbol.bytes.test(byte)) continue;
    Stack moved = stack;
    ++moved.back().index;
    Expand(std::move(moved), &next, &can_end, 0);
  }
  if (next.empty() && !can_end) return false;
  if (next.size() > 1) {
    std::sort(next.begin(), next.end());
    next.erase(std::unique(next.begin(), next.end()), next.end());
  }
  stacks_ = std::move(next);
  can_end_ = can_end;
  return true;
}

std::string GrammarMatcher::Key() const {
  std::string key(1, can_end_ ? 'e' : '-');
  for (const Stack& stack : stacks_) {  // each stack's length, then its positions
    const auto size = static_cast<uint32_t>(stack.size());
    key.append(reinterpret_cast<const char*>(&size), sizeof(size));
    key.append(reinterpret_cast<const char*>(stack.data()), stack.size() * sizeof(Position));
  }
  return key;
}

bool GrammarMatcher::AdvanceAll(std::string_view bytes) {
  for (char c : bytes) {
    if (!Advance(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

}  // namespace sy
