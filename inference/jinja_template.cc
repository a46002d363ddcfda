#include "inference/jinja_template.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

// Errors inside this file are thrown as JinjaError (parse and render are deep recursions where
// threading a Status through every call would hide the logic) and become a Status at the two
// public entry points, Parse and Render; nothing throws out of them.

namespace sy {
namespace {

using Json = nlohmann::ordered_json;

struct JinjaError {
  std::string message;
  bool exhausted = false;  // a bound was hit (ResourceExhausted) rather than a template error
};

[[noreturn]] void Fail(int line, const std::string& message) {
  throw JinjaError{"chat template line " + std::to_string(line) + ": " + message};
}

// ---------------------------------------------------------------- UTF-8 helpers

// The byte offsets of the code points of `s` (plus s.size() at the end).
std::vector<size_t> CodePointStarts(std::string_view s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  starts.push_back(s.size());
  return starts;
}

std::vector<std::string> CodePoints(std::string_view s) {
  const std::vector<size_t> starts = CodePointStarts(s);
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    out.emplace_back(s.substr(starts[i], starts[i + 1] - starts[i]));
  }
  return out;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// ---------------------------------------------------------------- template pieces

struct Piece {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string text;
  int line;
};

int CountLines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// The end of a tag's inside starting at `from`: the position of `close` ("}}" or "%}"), skipping
// quoted strings; npos when there is none.
size_t FindTagEnd(std::string_view src, size_t from, std::string_view close) {
  char quote = 0;
  for (size_t i = from; i < src.size(); ++i) {
    const char c = src[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (src.compare(i, close.size(), close) == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

std::string Trimmed(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(s[b])) ++b;
  while (e > b && IsSpace(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

// Splits the source into text, {{ }} and {% %} pieces, applying whitespace control, trim_blocks
// and lstrip_blocks as transformers' environment does; comments and raw blocks are resolved here.
std::vector<Piece> SplitTemplate(std::string_view src) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  int line = 1;
  bool strip_next = false;    // the previous tag ended with '-'
  bool trim_newline = false;  // the previous tag was a block or comment (trim_blocks)
  bool line_starting = true;  // the text begins a line of the source
  while (pos <= src.size()) {
    size_t open = pos;
    while (true) {
      open = src.find('{', open);
      if (open == std::string_view::npos || open + 1 >= src.size()) {
        open = std::string_view::npos;
        break;
      }
      const char k = src[open + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++open;
    }
    std::string text(
        src.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos));
    const int text_line = line;
    line += CountLines(text);
    if (strip_next) {
      size_t b = 0;
      while (b < text.size() && IsSpace(text[b])) ++b;
      text.erase(0, b);
    } else if (trim_newline) {
      if (text.rfind("\r\n", 0) == 0) {
        text.erase(0, 2);
      } else if (!text.empty() && text[0] == '\n') {
        text.erase(0, 1);
      }
    }
    if (open == std::string_view::npos) {
      if (!text.empty()) pieces.push_back({Piece::kText, text, text_line});
      break;
    }
    const char kind = src[open + 1];
    const char modifier = open + 2 < src.size() ? src[open + 2] : 0;
    if (modifier == '-') {
      while (!text.empty() && IsSpace(text.back())) text.pop_back();
    } else if (kind != '{' && modifier != '+') {
      // lstrip_blocks: the spaces and tabs between the start of the line and a block tag go.
      const size_t nl = text.rfind('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || line_starting) &&
          text.find_first_not_of(" \t", from) == std::string::npos) {
        text.erase(from);
      }
    }
    if (!text.empty()) pieces.push_back({Piece::kText, text, text_line});
    const size_t inner = open + 2 + (modifier == '-' || modifier == '+' ? 1 : 0);
    size_t close;
    if (kind == '#') {
      close = src.find("#}", inner);
    } else {
      close = FindTagEnd(src, inner, kind == '{' ? "}}" : "%}");
    }
    if (close == std::string_view::npos) {
      Fail(line, std::string("a '{") + kind + "' tag is never closed");
    }
    std::string body(src.substr(inner, close - inner));
    line += CountLines(body);
    strip_next = !body.empty() && body.back() == '-';
    trim_newline = kind != '{';
    if (strip_next) {
      body.pop_back();
    } else if (kind != '{' && !body.empty() && body.back() == '+') {
      body.pop_back();  // `+%}`: keep the newline after the tag
      trim_newline = false;
    }
    pos = close + 2;
    if (kind == '%' && Trimmed(body) == "raw") {
      // Everything up to {% endraw %} is text.
      size_t at = pos;
      while (true) {
        const size_t tag = src.find("{%", at);
        if (tag == std::string_view::npos) Fail(line, "{% raw %} is never closed");
        size_t in = tag + 2 + (tag + 2 < src.size() && (src[tag + 2] == '-') ? 1 : 0);
        const size_t end = src.find("%}", in);
        if (end == std::string_view::npos) Fail(line, "{% raw %} is never closed");
        std::string tag_body(src.substr(in, end - in));
        if (!tag_body.empty() && tag_body.back() == '-') tag_body.pop_back();
        if (Trimmed(tag_body) == "endraw") {
          const std::string raw(src.substr(pos, tag - pos));
          if (!raw.empty()) pieces.push_back({Piece::kText, raw, line});
          line += CountLines(raw);
          strip_next = src[end - 1] == '-';
          pos = end + 2;
          break;
        }
        at = end + 2;
      }
    } else if (kind != '#') {
      pieces.push_back({kind == '{' ? Piece::kExpr : Piece::kStmt, body, line});
    }
    // Does the text after the tag begin a line of the source (for lstrip_blocks)? Only when the
    // tag itself swallowed a newline: trim_blocks' one, or the whitespace a '-' strips.
    if (strip_next) {
      size_t q = pos;
      while (q < src.size() && IsSpace(src[q])) ++q;
      line_starting = q > pos && src[q - 1] == '\n';
    } else {
      line_starting = trim_newline && pos < src.size() && src[pos] == '\n';
    }
  }
  return pieces;
}

// ---------------------------------------------------------------- expression tokens

struct Token {
  enum Kind { kName, kInt, kFloat, kString, kOp, kEnd } kind = kEnd;
  std::string text;  // the name, the operator, or the string's value
  int64_t int_value = 0;
  double float_value = 0.0;
};

std::vector<Token> Tokenize(std::string_view s, int line) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (IsSpace(c)) {
      ++i;
      continue;
    }
    Token t;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      t.kind = Token::kName;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          is_float = true;
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      std::string digits;
      for (size_t k = i; k < j; ++k) {
        if (s[k] != '_') digits += s[k];
      }
      if (is_float) {
        t.kind = Token::kFloat;
        t.float_value = std::strtod(digits.c_str(), nullptr);
      } else {
        t.kind = Token::kInt;
        const auto [p, ec] =
            std::from_chars(digits.data(), digits.data() + digits.size(), t.int_value);
        if (ec != std::errc() || p != digits.data() + digits.size()) {
          Fail(line, "integer literal " + digits + " out of range");
        }
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      size_t j = i + 1;
      std::string value;
      while (j < s.size() && s[j] != c) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[j + 1];
          switch (e) {
            case 'n':
              value += '\n';
              break;
            case 't':
              value += '\t';
              break;
            case 'r':
              value += '\r';
              break;
            case '\\':
            case '\'':
            case '"':
              value += e;
              break;
            default:
              value += '\\';
              value += e;
          }
          j += 2;
        } else {
          value += s[j++];
        }
      }
      if (j >= s.size()) Fail(line, "a string literal is never closed");
      t.kind = Token::kString;
      t.text = value;
      i = j + 1;
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[",
                                         "]",  "{",  "}",  ".",  ",",  ":",  "|", "~", "+",
                                         "-",  "*",  "/",  "%",  "<",  ">",  "="};
      bool matched = false;
      for (const char* op : kOps) {
        const std::string_view o(op);
        if (s.compare(i, o.size(), o) == 0) {
          t.kind = Token::kOp;
          t.text = std::string(o);
          i += o.size();
          matched = true;
          break;
        }
      }
      if (!matched) Fail(line, std::string("unexpected character '") + c + "'");
    }
    out.push_back(std::move(t));
  }
  out.push_back(Token{});
  return out;
}

// ---------------------------------------------------------------- syntax tree

struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNot,
    kNeg,
    kBinary,
    kCompare,
    kAnd,
    kOr,
    kCond
  } kind = kLiteral;
  int line = 0;
  Json literal;
  std::string name;                         // a name, attribute, operator, filter or test
  bool negated = false;                     // `is not`, `not in`
  std::vector<std::unique_ptr<Expr>> args;  // operands / children in order
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;  // kCompare: the operator between args[i] and args[i + 1]
};
using ExprPtr = std::unique_ptr<Expr>;

struct Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kBlock };
  Node(Kind k, int l) : kind(k), line(l) {}
  Kind kind;
  int line = 0;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput, kSet value, kFor iterable
  std::vector<std::string> targets;  // kFor names, kSet: {name} or {name, attr}
  ExprPtr filter;                    // kFor `if`
  std::vector<std::pair<ExprPtr, std::vector<Node>>> branches;  // kIf (cond, body)
  std::vector<Node> body;                                       // kFor, kSetBlock, kBlock
  std::vector<Node> else_body;                                  // kIf, kFor
};

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : tokens_(std::move(tokens)), line_(line) {}

  ExprPtr Expression() {
    Guard g(*this);
    ExprPtr e = Or();
    while (IsName("if")) {
      Next();
      auto cond = std::make_unique<Expr>(Make(Expr::kCond));
      cond->args.push_back(Or());          // the condition
      cond->args.push_back(std::move(e));  // the value when true
      if (IsName("else")) {
        Next();
        cond->args.push_back(Expression());
      }
      e = std::move(cond);
    }
    return e;
  }
  // An expression without the conditional form `a if c else b` (a for loop's iterable, which a
  // filter `if` may follow).
  ExprPtr OrExpression() { return Or(); }
  // A whole tag's expression, nothing left over.
  ExprPtr Complete() {
    ExprPtr e = Expression();
    ExpectEnd();
    return e;
  }
  bool IsName(std::string_view n) const { return Peek().kind == Token::kName && Peek().text == n; }
  bool IsOp(std::string_view o) const { return Peek().kind == Token::kOp && Peek().text == o; }
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  Token Next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool AtEnd() const { return Peek().kind == Token::kEnd; }
  void ExpectEnd() {
    if (!AtEnd()) Fail(line_, "unexpected '" + Describe(Peek()) + "'");
  }
  void ExpectOp(std::string_view o) {
    if (!IsOp(o))
      Fail(line_, "expected '" + std::string(o) + "', found '" + Describe(Peek()) + "'");
    Next();
  }
  std::string ExpectName() {
    if (Peek().kind != Token::kName)
      Fail(line_, "expected a name, found '" + Describe(Peek()) + "'");
    return Next().text;
  }

 private:
  struct Guard {
    explicit Guard(ExprParser& p) : p_(p) {
      if (++p_.depth_ > JinjaTemplate::kMaxDepth) Fail(p_.line_, "expression nests too deeply");
    }
    ~Guard() { --p_.depth_; }
    ExprParser& p_;
  };
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Token::kEnd:
        return "end of tag";
      case Token::kString:
        return "'" + t.text + "'";
      case Token::kInt:
        return std::to_string(t.int_value);
      case Token::kFloat:
        return std::to_string(t.float_value);
      case Token::kName:
      case Token::kOp:
        break;
    }
    return t.text;
  }
  Expr Make(Expr::Kind kind) const {
    Expr e;
    e.kind = kind;
    e.line = line_;
    return e;
  }
  ExprPtr Binary(Expr::Kind kind, std::string op, ExprPtr a, ExprPtr b) {
    auto e = std::make_unique<Expr>(Make(kind));
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprPtr Or() {
    ExprPtr e = And();
    while (IsName("or")) {
      Next();
      e = Binary(Expr::kOr, "or", std::move(e), And());
    }
    return e;
  }
  ExprPtr And() {
    ExprPtr e = Not();
    while (IsName("and")) {
      Next();
      e = Binary(Expr::kAnd, "and", std::move(e), Not());
    }
    return e;
  }
  ExprPtr Not() {
    Guard g(*this);
    if (IsName("not")) {
      Next();
      auto e = std::make_unique<Expr>(Make(Expr::kNot));
      e->args.push_back(Not());
      return e;
    }
    return Compare();
  }
  ExprPtr Compare() {
    ExprPtr first = Math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && Peek(1).kind == Token::kName && Peek(1).text == "in") {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      if (cmp == nullptr) {
        cmp = std::make_unique<Expr>(Make(Expr::kCompare));
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(Math1());
    }
    return cmp != nullptr ? std::move(cmp) : std::move(first);
  }
  ExprPtr Math1() {
    ExprPtr e = Concat();
    while (IsOp("+") || IsOp("-")) {
      std::string op = Next().text;
      e = Binary(Expr::kBinary, op, std::move(e), Concat());
    }
    return e;
  }
  ExprPtr Concat() {
    ExprPtr e = Math2();
    while (IsOp("~")) {
      Next();
      e = Binary(Expr::kBinary, "~", std::move(e), Math2());
    }
    return e;
  }
  ExprPtr Math2() {
    ExprPtr e = Pow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      std::string op = Next().text;
      e = Binary(Expr::kBinary, op, std::move(e), Pow());
    }
    return e;
  }
  ExprPtr Pow() {
    ExprPtr e = Unary(true);
    while (IsOp("**")) {
      Next();
      e = Binary(Expr::kBinary, "**", std::move(e), Unary(true));
    }
    return e;
  }
  ExprPtr Unary(bool with_filter) {
    Guard g(*this);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const bool neg = Next().text == "-";
      ExprPtr operand = Unary(false);
      if (neg) {
        e = std::make_unique<Expr>(Make(Expr::kNeg));
        e->args.push_back(std::move(operand));
      } else {
        e = std::move(operand);
      }
    } else {
      e = Primary();
    }
    e = Postfix(std::move(e));
    if (with_filter) e = FilterExpr(std::move(e));
    return e;
  }
  ExprPtr Primary() {
    const Token t = Next();
    switch (t.kind) {
      case Token::kName: {
        if (t.text == "true" || t.text == "True") return Literal(true);
        if (t.text == "false" || t.text == "False") return Literal(false);
        if (t.text == "none" || t.text == "None") return Literal(nullptr);
        auto e = std::make_unique<Expr>(Make(Expr::kName));
        e->name = t.text;
        return e;
      }
      case Token::kInt:
        return Literal(t.int_value);
      case Token::kFloat:
        return Literal(t.float_value);
      case Token::kString: {
        std::string s = t.text;
        while (Peek().kind == Token::kString) s += Next().text;  // adjacent literals join
        return Literal(s);
      }
      case Token::kOp:
        if (t.text == "(") {
          if (IsOp(")")) {
            Next();
            auto e = std::make_unique<Expr>(Make(Expr::kList));
            return e;
          }
          ExprPtr first = Expression();
          if (IsOp(",")) {
            auto tuple = std::make_unique<Expr>(Make(Expr::kList));
            tuple->args.push_back(std::move(first));
            while (IsOp(",")) {
              Next();
              if (IsOp(")")) break;
              tuple->args.push_back(Expression());
            }
            ExpectOp(")");
            return tuple;
          }
          ExpectOp(")");
          return first;
        }
        if (t.text == "[") {
          auto list = std::make_unique<Expr>(Make(Expr::kList));
          while (!IsOp("]")) {
            list->args.push_back(Expression());
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("]");
          return list;
        }
        if (t.text == "{") {
          auto dict = std::make_unique<Expr>(Make(Expr::kDict));
          while (!IsOp("}")) {
            dict->args.push_back(Expression());
            ExpectOp(":");
            dict->args.push_back(Expression());
            if (!IsOp(",")) break;
            Next();
          }
          ExpectOp("}");
          return dict;
        }
        break;
      case Token::kEnd:
        Fail(line_, "an expression ends too early");
    }
    Fail(line_, "unexpected '" + Describe(t) + "'");
  }
  ExprPtr Literal(Json value) {
    auto e = std::make_unique<Expr>(Make(Expr::kLiteral));
    e->literal = std::move(value);
    return e;
  }
  ExprPtr Postfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        Next();
        auto attr = std::make_unique<Expr>(Make(Expr::kAttr));
        if (Peek().kind == Token::kInt) {  // x.0 is x[0]
          attr->kind = Expr::kIndex;
          attr->args.push_back(std::move(e));
          attr->args.push_back(Literal(Next().int_value));
        } else {
          attr->name = ExpectName();
          attr->args.push_back(std::move(e));
        }
        e = std::move(attr);
      } else if (IsOp("[")) {
        Next();
        e = Subscript(std::move(e));
      } else if (IsOp("(")) {
        e = Call(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprPtr Subscript(ExprPtr target) {
    // [i] or [a:b:c] with any part left out.
    ExprPtr parts[3];
    int colons = 0;
    if (!IsOp(":")) parts[0] = Expression();
    while (IsOp(":") && colons < 2) {
      Next();
      ++colons;
      if (!IsOp(":") && !IsOp("]")) parts[colons] = Expression();
    }
    ExpectOp("]");
    auto e = std::make_unique<Expr>(Make(colons == 0 ? Expr::kIndex : Expr::kSlice));
    e->args.push_back(std::move(target));
    if (colons == 0) {
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    for (ExprPtr& p : parts) e->args.push_back(p != nullptr ? std::move(p) : Literal(nullptr));
    return e;
  }
  // Arguments `(a, b, k=v)` into e->args (after whatever is there) and e->kwargs.
  void Arguments(Expr& e) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (Peek().kind == Token::kName && Peek(1).kind == Token::kOp && Peek(1).text == "=") {
        std::string key = Next().text;
        Next();
        e.kwargs.emplace_back(std::move(key), Expression());
      } else {
        e.args.push_back(Expression());
      }
      if (!IsOp(",")) break;
      Next();
    }
    ExpectOp(")");
  }
  ExprPtr Call(ExprPtr callee) {
    auto e = std::make_unique<Expr>(Make(Expr::kCall));
    e->args.push_back(std::move(callee));
    Arguments(*e);
    return e;
  }
  ExprPtr FilterExpr(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        Next();
        auto f = std::make_unique<Expr>(Make(Expr::kFilter));
        f->name = ExpectName();
        f->args.push_back(std::move(e));
        if (IsOp("(")) Arguments(*f);
        e = std::move(f);
      } else if (IsName("is")) {
        Next();
        auto t = std::make_unique<Expr>(Make(Expr::kTest));
        if (IsName("not")) {
          Next();
          t->negated = true;
        }
        t->name = ExpectName();
        t->args.push_back(std::move(e));
        static const char* const kTakesBareArg[] = {"divisibleby", "eq", "equalto", "ne", "sameas",
                                                    "ge",          "gt", "le",      "lt", "in"};
        const bool bare = std::any_of(std::begin(kTakesBareArg), std::end(kTakesBareArg),
                                      [&](const char* n) { return t->name == n; });
        if (IsOp("(")) {
          Arguments(*t);
        } else if (bare && !AtEnd() && !IsName("and") && !IsName("or") && !IsName("else") &&
                   !IsName("if") && !IsOp(")") && !IsOp(",") && !IsOp("]")) {
          t->args.push_back(Unary(false));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        e = Call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_;
  int depth_ = 0;
};

// Builds the statement tree from the pieces.
class TreeBuilder {
 public:
  explicit TreeBuilder(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  std::vector<Node> Build() {
    std::vector<Node> nodes;
    const std::string end = Block(nodes, {});
    if (!end.empty()) Fail(line_, "unexpected {% " + end + " %}");
    return nodes;
  }

 private:
  // Parses nodes into `out` until a statement whose keyword is in `stops`; returns that keyword
  // (its parser positioned after it) or "" at the end of the template.
  std::string Block(std::vector<Node>& out, const std::vector<std::string>& stops) {
    if (++depth_ > JinjaTemplate::kMaxDepth) Fail(line_, "blocks nest too deeply");
    while (at_ < pieces_.size()) {
      const Piece& p = pieces_[at_++];
      line_ = p.line;
      if (p.kind == Piece::kText) {
        Node n(Node::kText, p.line);
        n.text = p.text;
        out.push_back(std::move(n));
        continue;
      }
      if (p.kind == Piece::kExpr) {
        Node n(Node::kOutput, p.line);
        ExprParser parser(Tokenize(p.text, p.line), p.line);
        n.expr = parser.Complete();
        out.push_back(std::move(n));
        continue;
      }
      parser_ = std::make_unique<ExprParser>(Tokenize(p.text, p.line), p.line);
      const std::string keyword = parser_->ExpectName();
      if (std::find(stops.begin(), stops.end(), keyword) != stops.end()) {
        --depth_;
        return keyword;
      }
      out.push_back(Statement(keyword, p.line));
    }
    --depth_;
    if (!stops.empty()) Fail(line_, "{% " + stops.back() + " %} is missing");
    return "";
  }

  Node Statement(const std::string& keyword, int line) {
    Node n(Node::kText, line);
    if (keyword == "if") {
      n.kind = Node::kIf;
      ExprPtr cond = parser_->Complete();
      while (true) {
        std::vector<Node> body;
        const std::string end = Block(body, {"elif", "else", "endif"});
        n.branches.emplace_back(std::move(cond), std::move(body));
        if (end == "elif") {
          cond = parser_->Complete();
          continue;
        }
        if (end == "else") {
          parser_->ExpectEnd();
          if (Block(n.else_body, {"endif"}) != "endif") Fail(line, "{% endif %} is missing");
        }
        parser_->ExpectEnd();
        return n;
      }
    }
    if (keyword == "for") {
      n.kind = Node::kFor;
      n.targets.push_back(parser_->ExpectName());
      while (parser_->IsOp(",")) {
        parser_->Next();
        n.targets.push_back(parser_->ExpectName());
      }
      if (!parser_->IsName("in")) Fail(line, "expected 'in' in a for loop");
      parser_->Next();
      // The iterable stops before a trailing `if` filter (no conditional expression here).
      n.expr = IterableExpr();
      if (parser_->IsName("if")) {
        parser_->Next();
        n.filter = parser_->Expression();
      }
      if (parser_->IsName("recursive")) Fail(line, "recursive loops are not supported");
      parser_->ExpectEnd();
      const std::string end = Block(n.body, {"else", "endfor"});
      if (end == "else") {
        parser_->ExpectEnd();
        Block(n.else_body, {"endfor"});
      }
      parser_->ExpectEnd();
      return n;
    }
    if (keyword == "set") {
      n.targets.push_back(parser_->ExpectName());
      if (parser_->IsOp(".")) {
        parser_->Next();
        n.targets.push_back(parser_->ExpectName());
      }
      if (parser_->IsOp(",")) Fail(line, "tuple assignment in {% set %} is not supported");
      if (parser_->AtEnd()) {
        if (n.targets.size() != 1) Fail(line, "a {% set %} block takes a plain name");
        n.kind = Node::kSetBlock;
        Block(n.body, {"endset"});
        parser_->ExpectEnd();
        return n;
      }
      n.kind = Node::kSet;
      parser_->ExpectOp("=");
      n.expr = parser_->Complete();
      return n;
    }
    if (keyword == "break" || keyword == "continue") {
      parser_->ExpectEnd();
      n.kind = keyword == "break" ? Node::kBreak : Node::kContinue;
      return n;
    }
    if (keyword == "generation") {
      parser_->ExpectEnd();
      n.kind = Node::kBlock;
      Block(n.body, {"endgeneration"});
      parser_->ExpectEnd();
      return n;
    }
    Fail(line, "unknown tag {% " + keyword + " %}");
  }

  // The iterable of a for loop: an expression without the conditional `x if c else y` form, so
  // that `for m in messages if m.role != 'system'` reads the `if` as the loop's filter.
  ExprPtr IterableExpr() { return parser_->OrExpression(); }

  std::vector<Piece> pieces_;
  size_t at_ = 0;
  int line_ = 1;
  int depth_ = 0;
  std::unique_ptr<ExprParser> parser_;
};

}  // namespace

struct JinjaTemplate::Program {
  std::vector<Node> nodes;
};

namespace {

// ---------------------------------------------------------------- values

struct Value {
  Json j;
  bool undefined = false;
  static Value Undefined() {
    Value v;
    v.undefined = true;
    return v;
  }
};

Value V(Json j) { return Value{std::move(j), false}; }

bool IsInt(const Json& j) { return j.is_number_integer(); }
int64_t AsInt(const Json& j, int line) {
  if (j.is_number_unsigned()) {
    if (j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) Fail(line, "integer out of range");
    return static_cast<int64_t>(j.get<uint64_t>());
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_boolean()) return j.get<bool>() ? 1 : 0;
  Fail(line, "expected an integer, got " + std::string(j.type_name()));
}
double AsDouble(const Json& j, int line) {
  if (j.is_number()) return j.get<double>();
  if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
  Fail(line, "expected a number, got " + std::string(j.type_name()));
}

bool Truthy(const Value& v) {
  if (v.undefined) return false;
  const Json& j = v.j;
  switch (j.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return j.get<bool>();
    case Json::value_t::number_integer:
      return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return j.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return j.get<double>() != 0.0;
    case Json::value_t::string:
      return !j.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !j.empty();
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return false;
}

// Python's repr of a float: the shortest text that reads back, with ".0" on integral values.
std::string PyFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), d);
  std::string s(buf, p);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string PyRepr(const Json& j);

// Python's str().
std::string PyStr(const Value& v) {
  if (v.undefined) return "";
  const Json& j = v.j;
  switch (j.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return j.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
      return std::to_string(j.get<int64_t>());
    case Json::value_t::number_unsigned:
      return std::to_string(j.get<uint64_t>());
    case Json::value_t::number_float:
      return PyFloat(j.get<double>());
    case Json::value_t::string:
      return j.get<std::string>();
    case Json::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + PyRepr(j[i]);
      return s + "]";
    }
    case Json::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        s += (first ? "" : ", ") + PyRepr(it.key()) + ": " + PyRepr(it.value());
        first = false;
      }
      return s + "}";
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
  return "";
}

std::string PyRepr(const Json& j) {
  if (!j.is_string()) return PyStr(V(j));
  const std::string& s = j.get_ref<const std::string&>();
  const char quote =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out + quote;
}

// Python's json.dumps(value, ensure_ascii=False, indent=indent): ", " and ": " without an indent,
// "," and ": " with one.
void DumpJson(const Json& j, std::optional<int> indent, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(*indent * lvl), ' ');
  };
  switch (j.type()) {
    case Json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < j.size(); ++i) {
        if (i > 0) out += indent ? "," : ", ";
        if (indent) newline(level + 1);
        DumpJson(j[i], indent, level + 1, out);
      }
      if (indent) newline(level);
      out += ']';
      return;
    }
    case Json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += indent ? "," : ", ";
        first = false;
        if (indent) newline(level + 1);
        DumpJson(Json(it.key()), indent, level + 1, out);
        out += ": ";
        DumpJson(it.value(), indent, level + 1, out);
      }
      if (indent) newline(level);
      out += '}';
      return;
    }
    case Json::value_t::string: {
      out += '"';
      for (const char c : j.get_ref<const std::string&>()) {
        switch (c) {
          case '"':
            out += "\\\"";
            break;
          case '\\':
            out += "\\\\";
            break;
          case '\n':
            out += "\\n";
            break;
          case '\r':
            out += "\\r";
            break;
          case '\t':
            out += "\\t";
            break;
          case '\b':
            out += "\\b";
            break;
          case '\f':
            out += "\\f";
            break;
          default:
            if (static_cast<unsigned char>(c) < 0x20) {
              char buf[8];
              std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
              out += buf;
            } else {
              out += c;
            }
        }
      }
      out += '"';
      return;
    }
    case Json::value_t::number_float:
      out += PyFloat(j.get<double>());
      if (out.size() >= 3 && out.compare(out.size() - 3, 3, "nan") == 0) {
        out.replace(out.size() - 3, 3, "NaN");
      } else if (out.size() >= 3 && out.compare(out.size() - 3, 3, "inf") == 0) {
        out.replace(out.size() - 3, 3, "Infinity");
      }
      return;
    case Json::value_t::null:
      out += "null";
      return;
    case Json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      out += j.dump();
      return;
    case Json::value_t::binary:
    case Json::value_t::discarded:
      break;
  }
}

const std::string& Str(const Value& v, int line, std::string_view what) {
  if (v.undefined || !v.j.is_string()) {
    Fail(line, std::string(what) + " needs a string, got " +
                   (v.undefined ? "undefined" : std::string(v.j.type_name())));
  }
  return v.j.get_ref<const std::string&>();
}

// Python's index rule: negative counts from the end; out of range: nullopt.
std::optional<size_t> PyIndex(int64_t i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(i);
}

// The indices a Python slice [start:stop:step] takes from a sequence of `size`.
std::vector<size_t> SliceIndices(const Value& start, const Value& stop, const Value& step,
                                 size_t size, int line) {
  const auto n = static_cast<int64_t>(size);
  const int64_t s = step.j.is_null() ? 1 : AsInt(step.j, line);
  if (s == 0) Fail(line, "slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.j.is_null()) return dflt;
    int64_t i = AsInt(v.j, line);
    if (i < 0) i += n;
    if (s > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, s > 0 ? 0 : n - 1);
  const int64_t e = clamp(stop, s > 0 ? n : -1);
  std::vector<size_t> out;
  for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out.push_back(static_cast<size_t>(i));
  return out;
}

std::string StripChars(const std::string& s, const Value* chars, bool left, bool right, int line) {
  std::vector<std::string> cps = CodePoints(s);
  std::vector<std::string> set;
  if (chars != nullptr && !chars->undefined && !chars->j.is_null()) {
    set = CodePoints(Str(*chars, line, "strip"));
  }
  auto strip = [&](const std::string& cp) {
    if (set.empty() && (chars == nullptr || chars->undefined || chars->j.is_null())) {
      return cp.size() == 1 && IsSpace(cp[0]);
    }
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

Json PySplit(const std::string& s, const Value* sep, int64_t maxsplit, int line) {
  Json out = Json::array();
  if (sep == nullptr || sep->undefined || sep->j.is_null()) {
    size_t i = 0;
    int64_t splits = 0;
    while (true) {
      while (i < s.size() && IsSpace(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && splits == maxsplit) {
        size_t e = s.size();
        while (e > i && IsSpace(s[e - 1])) --e;
        out.push_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !IsSpace(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      ++splits;
      i = j;
    }
    return out;
  }
  const std::string& d = Str(*sep, line, "split");
  if (d.empty()) Fail(line, "split: empty separator");
  size_t i = 0;
  int64_t splits = 0;
  while (true) {
    const size_t at = (maxsplit >= 0 && splits == maxsplit) ? std::string::npos : s.find(d, i);
    if (at == std::string::npos) {
      out.push_back(s.substr(i));
      return out;
    }
    out.push_back(s.substr(i, at - i));
    i = at + d.size();
    ++splits;
  }
}

std::string Replace(std::string s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t i = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, i);
    if (at == std::string::npos) break;
    out.append(s, i, at - i);
    out += to;
    i = at + from.size();
    ++done;
  }
  out.append(s, i, std::string::npos);
  return out;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string Title(std::string s) {
  bool start = true;
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
      start = false;
    } else {
      start = true;
    }
  }
  return s;
}
std::string Capitalize(std::string s) {
  s = Lower(std::move(s));
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

bool Equal(const Value& a, const Value& b) {
  if (a.undefined || b.undefined) return a.undefined && b.undefined;
  if (a.j.is_number() && b.j.is_number()) {
    if (IsInt(a.j) && IsInt(b.j)) return a.j == b.j;
    return a.j.get<double>() == b.j.get<double>();
  }
  return a.j == b.j;
}

// -1, 0, 1 for numbers, strings and arrays (Python's ordering); an error for anything else.
int Order(const Value& a, const Value& b, int line) {
  if (!a.undefined && !b.undefined) {
    if (a.j.is_number() && b.j.is_number()) {
      const double x = a.j.get<double>(), y = b.j.get<double>();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.j.is_string() && b.j.is_string()) {
      const int c = a.j.get_ref<const std::string&>().compare(b.j.get_ref<const std::string&>());
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    if (a.j.is_array() && b.j.is_array()) {
      for (size_t i = 0; i < std::min(a.j.size(), b.j.size()); ++i) {
        const int c = Order(V(a.j[i]), V(b.j[i]), line);
        if (c != 0) return c;
      }
      return a.j.size() < b.j.size() ? -1 : (a.j.size() > b.j.size() ? 1 : 0);
    }
  }
  Fail(line, "cannot order " + std::string(a.undefined ? "undefined" : a.j.type_name()) + " and " +
                 (b.undefined ? "undefined" : b.j.type_name()));
}

bool Contains(const Value& container, const Value& item, int line) {
  if (container.undefined) Fail(line, "'in' on an undefined value");
  const Json& c = container.j;
  if (c.is_string()) {
    return c.get_ref<const std::string&>().find(Str(item, line, "'in' on a string")) !=
           std::string::npos;
  }
  if (c.is_array()) {
    return std::any_of(c.begin(), c.end(), [&](const Json& e) { return Equal(V(e), item); });
  }
  if (c.is_object()) return item.j.is_string() && c.contains(item.j.get<std::string>());
  Fail(line, "'in' on " + std::string(c.type_name()));
}

// The items a for loop or a filter iterates: array elements, object keys, string characters.
Json Iterable(const Value& v, int line) {
  if (v.undefined) return Json::array();
  if (v.j.is_array()) return v.j;
  if (v.j.is_object()) {
    Json keys = Json::array();
    for (auto it = v.j.begin(); it != v.j.end(); ++it) keys.push_back(it.key());
    return keys;
  }
  if (v.j.is_string()) {
    Json chars = Json::array();
    for (std::string& cp : CodePoints(v.j.get_ref<const std::string&>())) chars.push_back(cp);
    return chars;
  }
  Fail(line, std::string("cannot iterate over ") + v.j.type_name());
}

Json Items(const Json& object) {
  Json items = Json::array();
  for (auto it = object.begin(); it != object.end(); ++it) {
    items.push_back(Json::array({it.key(), it.value()}));
  }
  return items;
}

// ---------------------------------------------------------------- rendering

class Renderer {
 public:
  explicit Renderer(const Json& context) {
    frames_.emplace_back();
    for (auto it = context.begin(); it != context.end(); ++it) {
      frames_.back()[it.key()] = V(it.value());
    }
  }

  std::string Run(const std::vector<Node>& nodes) {
    Render(nodes);
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Render(const std::vector<Node>& nodes) {
    for (const Node& n : nodes) {
      const Flow f = RenderNode(n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  void Emit(std::string_view s) {
    if (out_.size() + s.size() > JinjaTemplate::kMaxOutputBytes) {
      throw JinjaError{"chat template output passes " +
                           std::to_string(JinjaTemplate::kMaxOutputBytes) + " bytes",
                       true};
    }
    out_ += s;
  }

  Flow RenderNode(const Node& n) {
    switch (n.kind) {
      case Node::kText:
        Emit(n.text);
        return Flow::kNormal;
      case Node::kOutput:
        Emit(PyStr(Eval(*n.expr)));
        return Flow::kNormal;
      case Node::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (Truthy(Eval(*cond))) return Render(body);
        }
        return Render(n.else_body);
      case Node::kFor:
        return RenderFor(n);
      case Node::kSet: {
        Value v = Eval(*n.expr);
        if (n.targets.size() == 1) {
          frames_.back()[n.targets[0]] = std::move(v);
        } else {
          Value* ns = Lookup(n.targets[0]);
          if (ns == nullptr || ns->undefined || !ns->j.is_object()) {
            Fail(n.line, "'" + n.targets[0] + "' is not a namespace");
          }
          ns->j[n.targets[1]] = v.undefined ? Json() : std::move(v.j);
        }
        return Flow::kNormal;
      }
      case Node::kSetBlock: {
        std::string saved;
        saved.swap(out_);
        Render(n.body);
        std::string captured;
        captured.swap(out_);
        out_ = std::move(saved);
        frames_.back()[n.targets[0]] = V(captured);
        return Flow::kNormal;
      }
      case Node::kBreak:
        return Flow::kBreak;
      case Node::kContinue:
        return Flow::kContinue;
      case Node::kBlock:
        return Render(n.body);
    }
    return Flow::kNormal;
  }

  Flow RenderFor(const Node& n) {
    const Json all = Iterable(Eval(*n.expr), n.line);
    auto bind = [&](const Json& item) {
      if (n.targets.size() == 1) {
        frames_.back()[n.targets[0]] = V(item);
        return;
      }
      if (!item.is_array() || item.size() != n.targets.size()) {
        Fail(n.line, "cannot unpack " + PyRepr(item) + " into " + std::to_string(n.targets.size()) +
                         " names");
      }
      for (size_t k = 0; k < n.targets.size(); ++k) frames_.back()[n.targets[k]] = V(item[k]);
    };
    Json items = Json::array();
    if (n.filter != nullptr) {
      for (const Json& item : all) {
        frames_.emplace_back();
        bind(item);
        const bool keep = Truthy(Eval(*n.filter));
        frames_.pop_back();
        if (keep) items.push_back(item);
      }
    } else {
      items = all;
    }
    if (items.empty()) return Render(n.else_body);
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      if (++iterations_ > JinjaTemplate::kMaxLoopIterations) {
        throw JinjaError{"chat template runs more than " +
                             std::to_string(JinjaTemplate::kMaxLoopIterations) + " loop iterations",
                         true};
      }
      frames_.emplace_back();
      Json loop = {{"index", i + 1},         {"index0", i},
                   {"revindex", length - i}, {"revindex0", length - i - 1},
                   {"first", i == 0},        {"last", i == length - 1},
                   {"length", length}};
      if (i > 0) loop["previtem"] = items[static_cast<size_t>(i - 1)];
      if (i + 1 < length) loop["nextitem"] = items[static_cast<size_t>(i + 1)];
      frames_.back()["loop"] = V(std::move(loop));
      bind(items[static_cast<size_t>(i)]);
      const Flow f = Render(n.body);
      frames_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value* Lookup(const std::string& name) {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return &found->second;
    }
    return nullptr;
  }

  struct DepthGuard {
    explicit DepthGuard(Renderer& r, int line) : r_(r) {
      if (++r_.depth_ > JinjaTemplate::kMaxDepth) {
        throw JinjaError{"chat template line " + std::to_string(line) + ": nests too deeply", true};
      }
    }
    ~DepthGuard() { --r_.depth_; }
    Renderer& r_;
  };

  Value Eval(const Expr& e) {
    DepthGuard guard(*this, e.line);
    switch (e.kind) {
      case Expr::kLiteral:
        return V(e.literal);
      case Expr::kName: {
        const Value* v = Lookup(e.name);
        return v != nullptr ? *v : Value::Undefined();
      }
      case Expr::kList: {
        Json list = Json::array();
        for (const ExprPtr& a : e.args) list.push_back(Eval(*a).j);
        return V(std::move(list));
      }
      case Expr::kDict: {
        Json dict = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = Eval(*e.args[i]);
          dict[PyStr(k)] = Eval(*e.args[i + 1]).j;
        }
        return V(std::move(dict));
      }
      case Expr::kAttr: {
        const Value obj = Eval(*e.args[0]);
        if (obj.undefined) Fail(e.line, "undefined value has no attribute '" + e.name + "'");
        if (obj.j.is_object()) {
          auto it = obj.j.find(e.name);
          return it != obj.j.end() ? V(*it) : Value::Undefined();
        }
        return Value::Undefined();
      }
      case Expr::kIndex: {
        const Value obj = Eval(*e.args[0]);
        const Value key = Eval(*e.args[1]);
        return Index(obj, key, e.line);
      }
      case Expr::kSlice: {
        const Value obj = Eval(*e.args[0]);
        const Value a = Eval(*e.args[1]), b = Eval(*e.args[2]), c = Eval(*e.args[3]);
        if (obj.undefined) Fail(e.line, "slice of an undefined value");
        if (obj.j.is_array()) {
          Json out = Json::array();
          for (size_t i : SliceIndices(a, b, c, obj.j.size(), e.line)) out.push_back(obj.j[i]);
          return V(std::move(out));
        }
        if (obj.j.is_string()) {
          const std::vector<std::string> cps = CodePoints(obj.j.get_ref<const std::string&>());
          std::string out;
          for (size_t i : SliceIndices(a, b, c, cps.size(), e.line)) out += cps[i];
          return V(out);
        }
        Fail(e.line, std::string("cannot slice ") + obj.j.type_name());
      }
      case Expr::kCall:
        return EvalCall(e);
      case Expr::kFilter:
        return EvalFilter(e);
      case Expr::kTest: {
        const bool r = EvalTest(e);
        return V(e.negated ? !r : r);
      }
      case Expr::kNot:
        return V(!Truthy(Eval(*e.args[0])));
      case Expr::kNeg: {
        const Value v = Eval(*e.args[0]);
        if (v.undefined || !v.j.is_number()) Fail(e.line, "unary '-' needs a number");
        if (IsInt(v.j)) return V(-AsInt(v.j, e.line));
        return V(-v.j.get<double>());
      }
      case Expr::kAnd: {
        Value a = Eval(*e.args[0]);
        if (!Truthy(a)) return a;
        return Eval(*e.args[1]);
      }
      case Expr::kOr: {
        Value a = Eval(*e.args[0]);
        if (Truthy(a)) return a;
        return Eval(*e.args[1]);
      }
      case Expr::kCond: {
        if (Truthy(Eval(*e.args[0]))) return Eval(*e.args[1]);
        return e.args.size() > 2 ? Eval(*e.args[2]) : Value::Undefined();
      }
      case Expr::kCompare: {
        Value left = Eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = Eval(*e.args[i + 1]);
          const std::string& op = e.ops[i];
          bool r;
          if (op == "==") {
            r = Equal(left, right);
          } else if (op == "!=") {
            r = !Equal(left, right);
          } else if (op == "in") {
            r = Contains(right, left, e.line);
          } else if (op == "not in") {
            r = !Contains(right, left, e.line);
          } else {
            const int c = Order(left, right, e.line);
            r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!r) return V(false);
          left = std::move(right);
        }
        return V(true);
      }
      case Expr::kBinary:
        return EvalBinary(e);
    }
    Fail(e.line, "unknown expression");
  }

  Value Index(const Value& obj, const Value& key, int line) {
    if (obj.undefined) Fail(line, "subscript of an undefined value");
    if (obj.j.is_object()) {
      if (key.undefined || !key.j.is_string()) return Value::Undefined();
      auto it = obj.j.find(key.j.get<std::string>());
      return it != obj.j.end() ? V(*it) : Value::Undefined();
    }
    if (obj.j.is_array() || obj.j.is_string()) {
      if (key.undefined || !key.j.is_number_integer()) {
        Fail(line, "a list or string index must be an integer");
      }
      if (obj.j.is_array()) {
        const std::optional<size_t> i = PyIndex(AsInt(key.j, line), obj.j.size());
        return i ? V(obj.j[*i]) : Value::Undefined();
      }
      const std::vector<std::string> cps = CodePoints(obj.j.get_ref<const std::string&>());
      const std::optional<size_t> i = PyIndex(AsInt(key.j, line), cps.size());
      return i ? V(cps[*i]) : Value::Undefined();
    }
    return Value::Undefined();
  }

  Value EvalBinary(const Expr& e) {
    const Value a = Eval(*e.args[0]);
    const Value b = Eval(*e.args[1]);
    const std::string& op = e.name;
    const int line = e.line;
    if (op == "~") return V(PyStr(a) + PyStr(b));
    if (a.undefined || b.undefined) Fail(line, "'" + op + "' on an undefined value");
    const Json& x = a.j;
    const Json& y = b.j;
    if (op == "+") {
      if (x.is_string() && y.is_string()) {
        return V(x.get_ref<const std::string&>() + y.get_ref<const std::string&>());
      }
      if (x.is_array() && y.is_array()) {
        Json out = x;
        for (const Json& v : y) out.push_back(v);
        return V(std::move(out));
      }
    }
    if (op == "*" && (x.is_string() || x.is_array()) && IsInt(y)) {
      const int64_t n = AsInt(y, line);
      if (n * static_cast<int64_t>(x.is_string() ? x.get_ref<const std::string&>().size()
                                                 : x.size()) >
          static_cast<int64_t>(JinjaTemplate::kMaxOutputBytes)) {
        throw JinjaError{"chat template builds a value that is too large", true};
      }
      Json out = x.is_string() ? Json("") : Json::array();
      for (int64_t i = 0; i < n; ++i) {
        if (x.is_string()) {
          out.get_ref<std::string&>() += x.get_ref<const std::string&>();
        } else {
          for (const Json& v : x) out.push_back(v);
        }
      }
      return V(std::move(out));
    }
    if (!(x.is_number() || x.is_boolean()) || !(y.is_number() || y.is_boolean())) {
      Fail(line,
           "unsupported operand types for " + op + ": " + x.type_name() + " and " + y.type_name());
    }
    const bool ints = !x.is_number_float() && !y.is_number_float();
    if (ints && op != "/" && op != "**") {
      const int64_t p = AsInt(x, line), q = AsInt(y, line);
      if (op == "+") return V(p + q);
      if (op == "-") return V(p - q);
      if (op == "*") return V(p * q);
      if (q == 0) Fail(line, "division by zero");
      if (op == "//") return V(p / q - ((p % q != 0 && ((p < 0) != (q < 0))) ? 1 : 0));
      if (op == "%") {
        const int64_t r = p % q;
        return V(r != 0 && ((r < 0) != (q < 0)) ? r + q : r);
      }
    }
    const double p = AsDouble(x, line), q = AsDouble(y, line);
    if (op == "+") return V(p + q);
    if (op == "-") return V(p - q);
    if (op == "*") return V(p * q);
    if (op == "**") {
      if (ints && q >= 0) return V(static_cast<int64_t>(std::llround(std::pow(p, q))));
      return V(std::pow(p, q));
    }
    if (q == 0) Fail(line, "division by zero");
    if (op == "/") return V(p / q);
    if (op == "//") return V(std::floor(p / q));
    if (op == "%") return V(p - q * std::floor(p / q));
    Fail(line, "unknown operator " + op);
  }

  // Positional argument i or keyword `name`, else `fallback`.
  Value Arg(const Expr& e, size_t first_positional, size_t i, std::string_view name,
            Value fallback = Value::Undefined()) {
    for (const auto& [k, v] : e.kwargs) {
      if (k == name) return Eval(*v);
    }
    if (first_positional + i < e.args.size()) return Eval(*e.args[first_positional + i]);
    return fallback;
  }

  Value EvalCall(const Expr& e) {
    const Expr& callee = *e.args[0];
    const int line = e.line;
    if (callee.kind == Expr::kName && Lookup(callee.name) == nullptr) {
      const std::string& f = callee.name;
      if (f == "raise_exception") {
        throw JinjaError{PyStr(Arg(e, 1, 0, "message"))};
      }
      if (f == "namespace") {
        Json ns = Json::object();
        if (e.args.size() > 1) {
          const Value init = Eval(*e.args[1]);
          if (!init.undefined && init.j.is_object()) ns = init.j;
        }
        for (const auto& [k, v] : e.kwargs) ns[k] = Eval(*v).j;
        return V(std::move(ns));
      }
      if (f == "range") {
        std::vector<int64_t> a;
        for (size_t i = 1; i < e.args.size(); ++i) a.push_back(AsInt(Eval(*e.args[i]).j, line));
        if (a.empty() || a.size() > 3) Fail(line, "range takes 1 to 3 arguments");
        const int64_t start = a.size() == 1 ? 0 : a[0];
        const int64_t stop = a.size() == 1 ? a[0] : a[1];
        const int64_t step = a.size() == 3 ? a[2] : 1;
        if (step == 0) Fail(line, "range step cannot be zero");
        Json out = Json::array();
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          if (static_cast<int64_t>(out.size()) >= JinjaTemplate::kMaxLoopIterations) {
            throw JinjaError{"chat template builds a range that is too long", true};
          }
          out.push_back(i);
        }
        return V(std::move(out));
      }
      if (f == "strftime_now") {
        const std::string& fmt = Str(Arg(e, 1, 0, "format"), line, "strftime_now");
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
        return V(std::string(buf, n));
      }
      Fail(line, "unknown function '" + f + "'");
    }
    if (callee.kind != Expr::kAttr) Fail(line, "only functions and methods can be called");
    const Value obj = Eval(*callee.args[0]);
    const std::string& m = callee.name;
    if (obj.undefined) Fail(line, "method '" + m + "' of an undefined value");
    if (obj.j.is_string()) {
      const std::string& s = obj.j.get_ref<const std::string&>();
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const Value chars = Arg(e, 1, 0, "chars");
        return V(StripChars(s, &chars, m != "rstrip", m != "lstrip", line));
      }
      if (m == "split" || m == "rsplit") {
        const Value sep = Arg(e, 1, 0, "sep");
        const Value max = Arg(e, 1, 1, "maxsplit");
        if (m == "rsplit" && !max.undefined && AsInt(max.j, line) >= 0) {
          Fail(line, "rsplit with maxsplit is not supported");
        }
        return V(PySplit(s, &sep, max.undefined ? -1 : AsInt(max.j, line), line));
      }
      if (m == "startswith" || m == "endswith") {
        const Value arg = Arg(e, 1, 0, "prefix");
        std::vector<std::string> options;
        if (!arg.undefined && arg.j.is_array()) {
          for (const Json& o : arg.j) options.push_back(Str(V(o), line, m));
        } else {
          options.push_back(Str(arg, line, m));
        }
        for (const std::string& o : options) {
          if (m == "startswith"
                  ? s.rfind(o, 0) == 0
                  : (s.size() >= o.size() && s.compare(s.size() - o.size(), o.size(), o) == 0)) {
            return V(true);
          }
        }
        return V(false);
      }
      if (m == "upper") return V(Upper(s));
      if (m == "lower") return V(Lower(s));
      if (m == "title") return V(Title(s));
      if (m == "capitalize") return V(Capitalize(s));
      if (m == "replace") {
        const Value count = Arg(e, 1, 2, "count");
        return V(Replace(s, Str(Arg(e, 1, 0, "old"), line, m), Str(Arg(e, 1, 1, "new"), line, m),
                         count.undefined ? -1 : AsInt(count.j, line)));
      }
      if (m == "count" || m == "find") {
        const std::string& sub = Str(Arg(e, 1, 0, "sub"), line, m);
        if (m == "find") {
          const size_t at = s.find(sub);
          if (at == std::string::npos) return V(-1);
          return V(static_cast<int64_t>(CodePointStarts(s.substr(0, at)).size() - 1));
        }
        if (sub.empty()) return V(static_cast<int64_t>(CodePointStarts(s).size()));
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) {
          ++n;
        }
        return V(n);
      }
      if (m == "join") {
        std::string out;
        const Json items = Iterable(Arg(e, 1, 0, "iterable"), line);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out += s;
          out += Str(V(items[i]), line, "join");
        }
        return V(out);
      }
    }
    if (obj.j.is_object()) {
      if (m == "items") return V(Items(obj.j));
      if (m == "keys") return V(Iterable(obj, line));
      if (m == "values") {
        Json out = Json::array();
        for (auto it = obj.j.begin(); it != obj.j.end(); ++it) out.push_back(it.value());
        return V(std::move(out));
      }
      if (m == "get") {
        const Value key = Arg(e, 1, 0, "key");
        const Value fallback = Arg(e, 1, 1, "default", V(nullptr));
        if (!key.undefined && key.j.is_string()) {
          auto it = obj.j.find(key.j.get<std::string>());
          if (it != obj.j.end()) return V(*it);
        }
        return fallback;
      }
    }
    Fail(line, "unknown method '" + m + "' of " + obj.j.type_name());
  }

  Value EvalFilter(const Expr& e) {
    const Value v = Eval(*e.args[0]);
    const std::string& f = e.name;
    const int line = e.line;
    if (f == "default" || f == "d") {
      const Value fallback = Arg(e, 1, 0, "default_value", V(""));
      const bool boolean = Truthy(Arg(e, 1, 1, "boolean", V(false)));
      return (v.undefined || (boolean && !Truthy(v))) ? fallback : v;
    }
    if (f == "safe") return v;
    if (f == "string") return V(PyStr(v));
    if (f == "length" || f == "count") {
      if (v.undefined) return V(0);
      if (v.j.is_string()) {
        return V(
            static_cast<int64_t>(CodePointStarts(v.j.get_ref<const std::string&>()).size() - 1));
      }
      if (v.j.is_array() || v.j.is_object()) return V(static_cast<int64_t>(v.j.size()));
      Fail(line, std::string("length of ") + v.j.type_name());
    }
    if (f == "tojson") {
      const Value indent = Arg(e, 1, 0, "indent");
      std::optional<int> ind;
      if (!indent.undefined && !indent.j.is_null()) {
        ind = static_cast<int>(std::clamp<int64_t>(AsInt(indent.j, line), 0, 64));
      }
      std::string out;
      DumpJson(v.undefined ? Json() : v.j, ind, 0, out);
      return V(out);
    }
    if (f == "trim") {
      const Value chars = Arg(e, 1, 0, "chars");
      return V(StripChars(PyStr(v), &chars, true, true, line));
    }
    if (f == "lower") return V(Lower(PyStr(v)));
    if (f == "upper") return V(Upper(PyStr(v)));
    if (f == "title") return V(Title(PyStr(v)));
    if (f == "capitalize") return V(Capitalize(PyStr(v)));
    if (f == "replace") {
      const Value count = Arg(e, 1, 2, "count");
      return V(Replace(PyStr(v), PyStr(Arg(e, 1, 0, "old")), PyStr(Arg(e, 1, 1, "new")),
                       count.undefined ? -1 : AsInt(count.j, line)));
    }
    if (f == "int") {
      if (v.j.is_number()) return V(static_cast<int64_t>(v.j.get<double>()));
      if (v.j.is_string()) {
        int64_t n = 0;
        const std::string s = Trimmed(v.j.get_ref<const std::string&>());
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
        return V(ec == std::errc() && p == s.data() + s.size() ? n : 0);
      }
      return V(0);
    }
    if (f == "float") {
      if (v.j.is_number()) return V(v.j.get<double>());
      if (v.j.is_string())
        return V(std::strtod(v.j.get_ref<const std::string&>().c_str(), nullptr));
      return V(0.0);
    }
    if (f == "abs") {
      if (v.undefined || !v.j.is_number()) Fail(line, "abs needs a number");
      if (IsInt(v.j)) return V(std::llabs(AsInt(v.j, line)));
      return V(std::fabs(v.j.get<double>()));
    }
    if (f == "first" || f == "last") {
      const Json items = Iterable(v, line);
      if (items.empty()) return Value::Undefined();
      return V(f == "first" ? items.front() : items.back());
    }
    if (f == "list") return V(Iterable(v, line));
    if (f == "reverse") {
      if (!v.undefined && v.j.is_string()) {
        std::vector<std::string> cps = CodePoints(v.j.get_ref<const std::string&>());
        std::string out;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
        return V(out);
      }
      Json items = Iterable(v, line);
      std::reverse(items.begin(), items.end());
      return V(std::move(items));
    }
    if (f == "unique") {
      Json out = Json::array();
      for (const Json& item : Iterable(v, line)) {
        if (std::none_of(out.begin(), out.end(), [&](const Json& o) { return o == item; })) {
          out.push_back(item);
        }
      }
      return V(std::move(out));
    }
    if (f == "join") {
      const std::string sep = PyStr(Arg(e, 1, 0, "d", V("")));
      const Value attribute = Arg(e, 1, 1, "attribute");
      std::string out;
      const Json items = Iterable(v, line);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += sep;
        Value item = V(items[i]);
        if (!attribute.undefined) item = Index(item, attribute, line);
        out += PyStr(item);
      }
      return V(out);
    }
    if (f == "items") {
      if (v.undefined) return V(Json::array());
      if (!v.j.is_object()) Fail(line, "items needs a mapping");
      return V(Items(v.j));
    }
    if (f == "dictsort") {
      if (v.undefined || !v.j.is_object()) Fail(line, "dictsort needs a mapping");
      const bool case_sensitive = Truthy(Arg(e, 1, 0, "case_sensitive", V(false)));
      Json items = Items(v.j);
      std::stable_sort(items.begin(), items.end(), [&](const Json& a, const Json& b) {
        std::string x = a[0].get<std::string>(), y = b[0].get<std::string>();
        if (!case_sensitive) {
          x = Lower(x);
          y = Lower(y);
        }
        return x < y;
      });
      return V(std::move(items));
    }
    if (f == "map") {
      const Value attribute = Arg(e, 99, 0, "attribute");
      Json out = Json::array();
      if (!attribute.undefined) {
        const Value fallback = Arg(e, 99, 0, "default");
        for (const Json& item : Iterable(v, line)) {
          Value got = Index(V(item), attribute, line);
          out.push_back(got.undefined ? fallback.j : got.j);
        }
        return V(std::move(out));
      }
      const std::string name = Str(Arg(e, 1, 0, "filter"), line, "map");
      for (const Json& item : Iterable(v, line)) {
        Expr call;
        call.kind = Expr::kFilter;
        call.line = line;
        call.name = name;
        auto lit = std::make_unique<Expr>();
        lit->literal = item;
        call.args.push_back(std::move(lit));
        out.push_back(EvalFilter(call).j);
      }
      return V(std::move(out));
    }
    if (f == "selectattr" || f == "rejectattr") {
      const Value attribute = Arg(e, 1, 0, "attribute");
      const bool has_test = e.args.size() > 2;
      Json out = Json::array();
      for (const Json& item : Iterable(v, line)) {
        const Value got = Index(V(item), attribute, line);
        bool pass;
        if (has_test) {
          Expr test;
          test.kind = Expr::kTest;
          test.line = line;
          test.name = Str(Eval(*e.args[2]), line, f);
          auto lit = std::make_unique<Expr>();
          lit->literal = got.j;
          if (got.undefined) {
            lit->kind = Expr::kName;
            lit->name = "\x01undefined";  // never bound: evaluates to undefined
          }
          test.args.push_back(std::move(lit));
          for (size_t k = 3; k < e.args.size(); ++k) {
            auto arg = std::make_unique<Expr>();
            arg->literal = Eval(*e.args[k]).j;
            test.args.push_back(std::move(arg));
          }
          pass = EvalTest(test);
        } else {
          pass = Truthy(got);
        }
        if (pass == (f == "selectattr")) out.push_back(item);
      }
      return V(std::move(out));
    }
    if (f == "indent") {
      const int64_t width = AsInt(Arg(e, 1, 0, "width", V(4)).j, line);
      const bool first = Truthy(Arg(e, 1, 1, "first", V(false)));
      const std::string pad(static_cast<size_t>(std::clamp<int64_t>(width, 0, 256)), ' ');
      const std::string s = PyStr(v);
      std::string out = first ? pad : "";
      for (size_t i = 0; i < s.size(); ++i) {
        out += s[i];
        if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out += pad;
      }
      return V(out);
    }
    Fail(line, "unknown filter '" + f + "'");
  }

  bool EvalTest(const Expr& e) {
    const Value v = Eval(*e.args[0]);
    const std::string& t = e.name;
    const int line = e.line;
    if (t == "defined") return !v.undefined;
    if (t == "undefined") return v.undefined;
    if (t == "none") return !v.undefined && v.j.is_null();
    if (t == "string") return !v.undefined && v.j.is_string();
    if (t == "number") return !v.undefined && v.j.is_number();
    if (t == "integer") return !v.undefined && v.j.is_number_integer();
    if (t == "float") return !v.undefined && v.j.is_number_float();
    if (t == "boolean") return !v.undefined && v.j.is_boolean();
    if (t == "true") return !v.undefined && v.j.is_boolean() && v.j.get<bool>();
    if (t == "false") return !v.undefined && v.j.is_boolean() && !v.j.get<bool>();
    if (t == "mapping") return !v.undefined && v.j.is_object();
    if (t == "iterable" || t == "sequence") {
      return !v.undefined && (v.j.is_array() || v.j.is_string() || v.j.is_object());
    }
    if (t == "odd" || t == "even") {
      const int64_t n = AsInt(v.j, line);
      return (n % 2 != 0) == (t == "odd");
    }
    if (t == "divisibleby") {
      const int64_t d = AsInt(Arg(e, 1, 0, "num").j, line);
      if (d == 0) Fail(line, "divisibleby 0");
      return AsInt(v.j, line) % d == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==" || t == "sameas") {
      return Equal(v, Arg(e, 1, 0, "other"));
    }
    if (t == "ne") return !Equal(v, Arg(e, 1, 0, "other"));
    if (t == "in") return Contains(Arg(e, 1, 0, "seq"), v, line);
    if (t == "lt" || t == "le" || t == "gt" || t == "ge") {
      const int c = Order(v, Arg(e, 1, 0, "other"), line);
      return t == "lt" ? c < 0 : t == "le" ? c <= 0 : t == "gt" ? c > 0 : c >= 0;
    }
    Fail(line, "unknown test '" + t + "'");
  }

  std::vector<std::map<std::string, Value>> frames_;
  std::string out_;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<JinjaTemplate> JinjaTemplate::Parse(std::string_view source) {
  try {
    auto program = std::make_shared<Program>();
    program->nodes = TreeBuilder(SplitTemplate(source)).Build();
    return JinjaTemplate(std::move(program));
  } catch (const JinjaError& e) {
    return InvalidArgumentError(e.message);
  }
}

Result<std::string> JinjaTemplate::Render(const Json& context) const {
  if (!context.is_object()) return InvalidArgumentError("the template context must be an object");
  try {
    return Renderer(context).Run(program_->nodes);
  } catch (const JinjaError& e) {
    if (e.exhausted) return ResourceExhaustedError(e.message);
    return InvalidArgumentError(e.message);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(std::string("chat template: ") + e.what());
  }
}

}  // namespace sy
