// Byte-level BPE from a Hugging Face tokenizer.json (see inference/tokenizer.h).
//
// The pre-tokenizer regexes are matched by hand-written scanners over code points, one per
// pattern that the Hugging Face files in use carry (compared by their exact text), with
// Unicode classes from ICU: \p{L} = general category L*, \p{N} = N*, \s = White_Space, as
// Oniguruma (the tokenizers library's regex engine) defines them.
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <utility>

#include "inference/tokenizer.h"
#include "storage/formats/text_file.h"

namespace sy {
namespace {

using nlohmann::json;
using storage::Quote;

constexpr int64_t kMaxVocab = int64_t{1} << 24;

// GPT-2's ByteLevel regex (tokenizers' pre_tokenizers/byte_level.rs).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2 / Qwen3 / OLMoE-era Split regex, and Llama 3's (digits in runs of up to 3).
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Pattern : uint8_t { kGpt2, kQwen2, kLlama3 };

// Strict UTF-8 -> code points, with each one's byte offset; false on malformed input.
bool DecodeUtf8(std::string_view s, std::vector<char32_t>* cps, std::vector<size_t>* offsets) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    char32_t cp;
    size_t len;
    if (b < 0x80) {
      cp = b;
      len = 1;
    } else if ((b & 0xe0) == 0xc0) {
      cp = b & 0x1f;
      len = 2;
    } else if ((b & 0xf0) == 0xe0) {
      cp = b & 0x0f;
      len = 3;
    } else if ((b & 0xf8) == 0xf0) {
      cp = b & 0x07;
      len = 4;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    cps->push_back(cp);
    offsets->push_back(i);
    i += len;
  }
  offsets->push_back(s.size());
  return true;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

bool IsLetter(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0; }
bool IsNumber(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }
bool IsSpace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }
bool IsOther(char32_t c) { return !IsSpace(c) && !IsLetter(c) && !IsNumber(c); }
bool IsNewline(char32_t c) { return c == '\r' || c == '\n'; }

// The end of the pre-token that starts at `i` (> i).
size_t MatchPreToken(Pattern pattern, const std::vector<char32_t>& s, size_t i) {
  const size_t n = s.size();
  auto run = [&](size_t j, bool (*cls)(char32_t)) {
    while (j < n && cls(s[j])) ++j;
    return j;
  };
  const bool fold = pattern != Pattern::kGpt2;
  auto lower = [&](char32_t c) { return fold && c >= 'A' && c <= 'Z' ? c + 32 : c; };
  // Contractions: 's 't 're 've 'm 'll 'd.
  if (s[i] == '\'' && i + 1 < n) {
    const char32_t a = lower(s[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const char32_t b = lower(s[i + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        return i + 3;
      }
    }
  }
  if (pattern == Pattern::kGpt2) {
    //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
    const size_t j = (s[i] == ' ' && i + 1 < n) ? i + 1 : i;
    for (bool (*cls)(char32_t) : {IsLetter, IsNumber, IsOther}) {
      if (cls(s[j])) return run(j, cls);
      if (j != i && cls(s[i])) return run(i, cls);
    }
  } else {
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (IsLetter(s[i])) return run(i, IsLetter);
    if (!IsNewline(s[i]) && !IsLetter(s[i]) && !IsNumber(s[i]) && i + 1 < n && IsLetter(s[i + 1])) {
      return run(i + 1, IsLetter);
    }
    // \p{N} | \p{N}{1,3}
    if (IsNumber(s[i])) {
      const size_t max = pattern == Pattern::kLlama3 ? 3 : 1;
      size_t j = i;
      while (j < n && j - i < max && IsNumber(s[j])) ++j;
      return j;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const size_t j = (s[i] == ' ' && i + 1 < n && IsOther(s[i + 1])) ? i + 1 : i;
    if (IsOther(s[j])) return run(run(j, IsOther), IsNewline);
    // \s*[\r\n]+
    const size_t ws_end = run(i, IsSpace);
    for (size_t k = ws_end; k > i; --k) {
      if (IsNewline(s[k - 1])) return k;
    }
  }
  // \s+(?!\S) | \s+
  const size_t ws_end = run(i, IsSpace);
  if (ws_end > i) {
    if (ws_end == n || ws_end - i == 1) return ws_end;
    return ws_end - 1;
  }
  return i + 1;  // not reached for these patterns (every code point is in one class)
}

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to 256 + k.
std::array<char32_t, 256> ByteToUnicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

struct AddedToken {
  int32_t id;
  std::string content;
  bool special = false;
};

class HfBpeTokenizer : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(std::string_view text) const override;
  Result<std::string> Decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  Result<TokenizerVocabulary> Vocabulary() const override;

  static Result<std::unique_ptr<Tokenizer>> Parse(std::string_view text, const std::string& source);

 private:
  Status EncodeSegment(std::string_view text, std::vector<int32_t>* out) const;
  Status EncodeWord(std::string_view bytes, std::vector<int32_t>* out) const;
  Result<std::string> Normalize(std::string_view text) const;

  std::string source_;
  std::unordered_map<std::string, int32_t> vocab_;  // token text (byte-mapped UTF-8) -> id
  std::vector<std::string> id_to_token_;            // "" for ids with no token
  std::vector<bool> is_added_;
  // (left id, right id) -> (rank, merged id).
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> merges_;
  std::array<int32_t, 256> byte_ids_{};  // -1 when the byte's character has no token
  std::unordered_map<char32_t, uint8_t> unicode_to_byte_;
  std::vector<AddedToken> added_;  // longest content first
  Pattern pattern_ = Pattern::kGpt2;
  bool add_prefix_space_ = false;
  bool nfc_ = false;
  bool ignore_merges_ = false;
};

Status Field(const std::string& source, const std::string& field, const std::string& what) {
  return InvalidArgumentError(source + ": " + field + " " + what +
                              "; the tokenizer.json is corrupt or not a Hugging Face tokenizer");
}

Status Unsupported(const std::string& source, const std::string& field, const std::string& value) {
  return UnimplementedError(source + ": " + field + " " + value +
                            " is not supported (byte-level BPE only: ByteLevel pre-tokenizer, "
                            "optionally after a Split with the GPT-2/Qwen2/Llama 3 regex; "
                            "normalizer null or NFC)");
}

// The pre-tokenizer: ByteLevel, or Sequence[Split(regex), ByteLevel(use_regex: false)].
Status ParsePreTokenizer(const json& pre, const std::string& src, Pattern* pattern,
                         bool* add_prefix_space) {
  auto byte_level = [&](const json& p, const std::string& field, bool* uses_regex) -> Status {
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
      return Field(src, field, "is not an object with a string \"type\"");
    }
    if (p["type"] != "ByteLevel") {
      return Unsupported(src, field + ".type", Quote(p["type"].get<std::string>()));
    }
    *add_prefix_space = false;
    if (p.contains("add_prefix_space")) {
      if (!p["add_prefix_space"].is_boolean()) {
        return Field(src, field + ".add_prefix_space", "is not a boolean");
      }
      *add_prefix_space = p["add_prefix_space"].get<bool>();
    }
    *uses_regex = true;
    if (p.contains("use_regex")) {
      if (!p["use_regex"].is_boolean()) return Field(src, field + ".use_regex", "is not a boolean");
      *uses_regex = p["use_regex"].get<bool>();
    }
    return Status::Ok();
  };
  if (!pre.is_object() || !pre.contains("type") || !pre["type"].is_string()) {
    return Field(src, "pre_tokenizer", "is not an object with a string \"type\"");
  }
  const std::string type = pre["type"].get<std::string>();
  if (type == "ByteLevel") {
    bool uses_regex = true;
    SY_RETURN_IF_ERROR(byte_level(pre, "pre_tokenizer", &uses_regex));
    if (!uses_regex) return Unsupported(src, "pre_tokenizer.use_regex", "false (no split)");
    *pattern = Pattern::kGpt2;
    return Status::Ok();
  }
  if (type != "Sequence") return Unsupported(src, "pre_tokenizer.type", Quote(type));
  const json& list = pre.contains("pretokenizers") ? pre["pretokenizers"] : json();
  if (!list.is_array() || list.size() != 2) {
    return Unsupported(src, "pre_tokenizer.pretokenizers", "other than [Split, ByteLevel]");
  }
  const json& split = list[0];
  if (!split.is_object() || !split.contains("type") || split["type"] != "Split") {
    return Unsupported(src, "pre_tokenizer.pretokenizers[0]", "other than a Split");
  }
  const json& pat = split.contains("pattern") ? split["pattern"] : json();
  if (!pat.is_object() || !pat.contains("Regex") || !pat["Regex"].is_string()) {
    return Field(src, "pre_tokenizer.pretokenizers[0].pattern", "has no string \"Regex\"");
  }
  const std::string regex = pat["Regex"].get<std::string>();
  if (regex == kQwen2Pattern) {
    *pattern = Pattern::kQwen2;
  } else if (regex == kLlama3Pattern) {
    *pattern = Pattern::kLlama3;
  } else if (regex == kGpt2Pattern) {
    *pattern = Pattern::kGpt2;
  } else {
    return Unsupported(src, "pre_tokenizer.pretokenizers[0].pattern.Regex", Quote(regex));
  }
  if (!split.contains("behavior") || split["behavior"] != "Isolated") {
    return Unsupported(src, "pre_tokenizer.pretokenizers[0].behavior", "other than Isolated");
  }
  if (split.contains("invert") && split["invert"] != false) {
    return Unsupported(src, "pre_tokenizer.pretokenizers[0].invert", "true");
  }
  bool uses_regex = false;
  SY_RETURN_IF_ERROR(byte_level(list[1], "pre_tokenizer.pretokenizers[1]", &uses_regex));
  if (uses_regex) {
    return Unsupported(src, "pre_tokenizer.pretokenizers[1].use_regex", "true after a Split");
  }
  return Status::Ok();
}

Result<std::unique_ptr<Tokenizer>> HfBpeTokenizer::Parse(std::string_view text,
                                                         const std::string& src) {
  SY_ASSIGN_OR_RETURN(json root, storage::ParseStrictJson(text, src, "tokenizer.json"));
  if (!root.is_object()) return Field(src, "the document", "is not a JSON object");
  auto tok = std::make_unique<HfBpeTokenizer>();
  tok->source_ = src;

  const json& model = root.contains("model") ? root["model"] : json();
  if (!model.is_object()) return Field(src, "model", "is missing or not an object");
  if (model.contains("type")) {
    if (!model["type"].is_string()) return Field(src, "model.type", "is not a string");
    if (model["type"] != "BPE") {
      return Unsupported(src, "model.type", Quote(model["type"].get<std::string>()));
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"}) {
    if (model.contains(key) && !model[key].is_null() &&
        !(model[key].is_string() && model[key].get<std::string>().empty())) {
      return Unsupported(src, std::string("model.") + key, "other than null");
    }
  }
  if (model.contains("byte_fallback") && model["byte_fallback"] != false) {
    return Unsupported(src, "model.byte_fallback", "true");
  }
  if (model.contains("ignore_merges")) {
    if (!model["ignore_merges"].is_boolean()) {
      return Field(src, "model.ignore_merges", "is not a boolean");
    }
    tok->ignore_merges_ = model["ignore_merges"].get<bool>();
  }

  const json& vocab = model.contains("vocab") ? model["vocab"] : json();
  if (!vocab.is_object()) return Field(src, "model.vocab", "is missing or not an object");
  auto set_token = [&](int64_t id, const std::string& token, bool added,
                       const std::string& field) -> Status {
    if (id < 0 || id >= kMaxVocab) {
      return Field(
          src, field,
          "has id " + std::to_string(id) + " outside [0, " + std::to_string(kMaxVocab) + ")");
    }
    const auto i = static_cast<size_t>(id);
    if (i >= tok->id_to_token_.size()) {
      tok->id_to_token_.resize(i + 1);
      tok->is_added_.resize(i + 1, false);
    }
    if (!tok->id_to_token_[i].empty() && !added) {
      return Field(src, field, "reuses id " + std::to_string(id));
    }
    tok->id_to_token_[i] = token;
    tok->is_added_[i] = added;
    return Status::Ok();
  };
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string field = "model.vocab[" + Quote(it.key()) + "]";
    if (!it.value().is_number_integer()) return Field(src, field, "is not an integer id");
    if (it.key().empty()) return Field(src, field, "is an empty token");
    const int64_t id = it.value().get<int64_t>();
    SY_RETURN_IF_ERROR(set_token(id, it.key(), false, field));
    tok->vocab_[it.key()] = static_cast<int32_t>(id);
  }

  const json& merges = model.contains("merges") ? model["merges"] : json::array();
  if (!merges.is_array()) return Field(src, "model.merges", "is not an array");
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string field = "model.merges[" + std::to_string(r) + "]";
    const json& m = merges[r];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Field(src, field, Quote(s) + " is not two tokens separated by one space");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return Field(src, field, "is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto ia = tok->vocab_.find(a), ib = tok->vocab_.find(b), iab = tok->vocab_.find(a + b);
    if (ia == tok->vocab_.end() || ib == tok->vocab_.end() || iab == tok->vocab_.end()) {
      return Field(src, field,
                   "merges " + Quote(a) + " and " + Quote(b) + ", and " +
                       (ia == tok->vocab_.end()   ? Quote(a)
                        : ib == tok->vocab_.end() ? Quote(b)
                                                  : Quote(a + b)) +
                       " is not in model.vocab");
    }
    // The first (lowest) rank of a pair wins, as in tokenizers.
    tok->merges_.emplace(std::make_pair(ia->second, ib->second),
                         std::make_pair(static_cast<int32_t>(r), iab->second));
  }

  const json& added = root.contains("added_tokens") ? root["added_tokens"] : json::array();
  if (!added.is_array()) return Field(src, "added_tokens", "is not an array");
  for (size_t k = 0; k < added.size(); ++k) {
    const std::string field = "added_tokens[" + std::to_string(k) + "]";
    const json& a = added[k];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string()) {
      return Field(src, field, "is not an object with an integer \"id\" and a string \"content\"");
    }
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (a.contains(flag) && a[flag] != false) {
        return Unsupported(src, field + "." + flag, "true");
      }
    }
    const std::string content = a["content"].get<std::string>();
    if (content.empty()) return Field(src, field + ".content", "is empty");
    bool special = false;
    if (a.contains("special")) {
      if (!a["special"].is_boolean()) return Field(src, field + ".special", "is not a boolean");
      special = a["special"].get<bool>();
    }
    const int64_t id = a["id"].get<int64_t>();
    SY_RETURN_IF_ERROR(set_token(id, content, true, field));
    tok->added_.push_back({static_cast<int32_t>(id), content, special});
  }
  std::stable_sort(
      tok->added_.begin(), tok->added_.end(),
      [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });

  const json& norm = root.contains("normalizer") ? root["normalizer"] : json();
  if (!norm.is_null()) {
    if (!norm.is_object() || !norm.contains("type") || !norm["type"].is_string()) {
      return Field(src, "normalizer", "is not null or an object with a string \"type\"");
    }
    if (norm["type"] != "NFC") {
      return Unsupported(src, "normalizer.type", Quote(norm["type"].get<std::string>()));
    }
    tok->nfc_ = true;
  }
  const json& pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json();
  SY_RETURN_IF_ERROR(ParsePreTokenizer(pre, src, &tok->pattern_, &tok->add_prefix_space_));
  const json& dec = root.contains("decoder") ? root["decoder"] : json();
  if (!dec.is_null() && !(dec.is_object() && dec.contains("type") && dec["type"] == "ByteLevel")) {
    return Unsupported(src, "decoder", "other than ByteLevel");
  }

  const std::array<char32_t, 256> table = ByteToUnicode();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(table[b], &ch);
    const auto it = tok->vocab_.find(ch);
    tok->byte_ids_[b] = it == tok->vocab_.end() ? -1 : it->second;
    tok->unicode_to_byte_[table[b]] = static_cast<uint8_t>(b);
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

Result<std::string> HfBpeTokenizer::Normalize(std::string_view text) const {
  if (!nfc_) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) return InternalError(std::string("ICU NFC: ") + u_errorName(err));
  if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 4)) {
    return InvalidArgumentError("text of " + std::to_string(text.size()) +
                                " bytes is too long to normalize");
  }
  const auto n = static_cast<int32_t>(text.size());
  std::vector<UChar> utf16(static_cast<size_t>(n) + 1);
  int32_t len16 = 0;
  u_strFromUTF8(utf16.data(), static_cast<int32_t>(utf16.size()), &len16, text.data(), n, &err);
  if (U_FAILURE(err)) return InvalidArgumentError("text is not valid UTF-8");
  std::vector<UChar> out(static_cast<size_t>(len16) * 3 + 1);
  const int32_t out_len = unorm2_normalize(nfc, utf16.data(), len16, out.data(),
                                           static_cast<int32_t>(out.size()), &err);
  if (U_FAILURE(err)) return InternalError(std::string("ICU NFC: ") + u_errorName(err));
  std::string utf8(static_cast<size_t>(out_len) * 3 + 1, '\0');
  int32_t len8 = 0;
  u_strToUTF8(utf8.data(), static_cast<int32_t>(utf8.size()), &len8, out.data(), out_len, &err);
  if (U_FAILURE(err)) return InternalError(std::string("ICU UTF-8: ") + u_errorName(err));
  utf8.resize(static_cast<size_t>(len8));
  return utf8;
}

Status HfBpeTokenizer::EncodeWord(std::string_view bytes, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    static const std::array<char32_t, 256> table = ByteToUnicode();
    std::string mapped;
    for (char c : bytes) AppendUtf8(table[static_cast<unsigned char>(c)], &mapped);
    if (const auto it = vocab_.find(mapped); it != vocab_.end()) {
      out->push_back(it->second);
      return Status::Ok();
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(bytes.size());
  for (char c : bytes) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) {
      return InvalidArgumentError(source_ + ": byte " +
                                  std::to_string(static_cast<unsigned char>(c)) +
                                  " of the text has no token in model.vocab");
    }
    symbols.push_back(id);
  }
  // Merge the lowest-ranked adjacent pair (leftmost on ties) until none is left, as tokenizers'
  // Word::merge_all: a doubly linked list of symbols and a min-heap of candidate merges keyed by
  // (rank, position), whose stale entries are skipped when popped. O(n log n) in the word's bytes.
  const int n = static_cast<int>(symbols.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<bool> alive(static_cast<size_t>(n), true);
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int pos) {
    if (pos < 0) return;
    const int right = next[static_cast<size_t>(pos)];
    if (right < 0) return;
    const int32_t l = symbols[static_cast<size_t>(pos)], r = symbols[static_cast<size_t>(right)];
    const auto it = merges_.find({l, r});
    if (it != merges_.end()) heap.push({it->second.first, pos, l, r, it->second.second});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const auto pos = static_cast<size_t>(e.pos);
    const int right = next[pos];
    if (!alive[pos] || right < 0 || symbols[pos] != e.left ||
        symbols[static_cast<size_t>(right)] != e.right) {
      continue;  // stale: one side was merged away since this entry was pushed
    }
    symbols[pos] = e.merged;
    alive[static_cast<size_t>(right)] = false;
    next[pos] = next[static_cast<size_t>(right)];
    if (next[pos] >= 0) prev[static_cast<size_t>(next[pos])] = e.pos;
    push(prev[pos]);
    push(e.pos);
  }
  for (int i = 0; i < n; ++i) {
    if (alive[static_cast<size_t>(i)]) out->push_back(symbols[static_cast<size_t>(i)]);
  }
  return Status::Ok();
}

Status HfBpeTokenizer::EncodeSegment(std::string_view raw, std::vector<int32_t>* out) const {
  SY_ASSIGN_OR_RETURN(std::string text, Normalize(raw));
  if (add_prefix_space_ && !text.empty() && text[0] != ' ') text.insert(text.begin(), ' ');
  std::vector<char32_t> cps;
  std::vector<size_t> offsets;
  if (!DecodeUtf8(text, &cps, &offsets)) {
    return InvalidArgumentError("the text to encode is not valid UTF-8");
  }
  size_t i = 0;
  while (i < cps.size()) {
    const size_t end = MatchPreToken(pattern_, cps, i);
    SY_RETURN_IF_ERROR(
        EncodeWord(std::string_view(text).substr(offsets[i], offsets[end] - offsets[i]), out));
    i = end;
  }
  return Status::Ok();
}

Result<std::vector<int32_t>> HfBpeTokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t start = 0;  // of the text not yet encoded
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* hit = nullptr;
    for (const AddedToken& a : added_) {  // longest first
      if (text.compare(pos, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    SY_RETURN_IF_ERROR(EncodeSegment(text.substr(start, pos - start), &ids));
    ids.push_back(hit->id);
    pos += hit->content.size();
    start = pos;
  }
  SY_RETURN_IF_ERROR(EncodeSegment(text.substr(start), &ids));
  return ids;
}

Result<std::string> HfBpeTokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() ||
        id_to_token_[static_cast<size_t>(id)].empty()) {
      return InvalidArgumentError(source_ + ": token id " + std::to_string(id) +
                                  " is not in the vocabulary");
    }
    const std::string& token = id_to_token_[static_cast<size_t>(id)];
    if (is_added_[static_cast<size_t>(id)]) {
      out += token;
      continue;
    }
    std::vector<char32_t> cps;
    std::vector<size_t> offsets;
    if (!DecodeUtf8(token, &cps, &offsets)) {
      return InvalidArgumentError(source_ + ": token " + std::to_string(id) +
                                  " is not valid UTF-8");
    }
    for (const char32_t c : cps) {
      const auto it = unicode_to_byte_.find(c);
      if (it != unicode_to_byte_.end()) {
        out += static_cast<char>(it->second);
      } else {
        AppendUtf8(c, &out);  // not a byte-level character: as tokenizers' decoder, kept as is
      }
    }
  }
  return out;
}

// As llama.cpp's convert_hf_to_gguf.py (get_vocab_base) writes a byte-level BPE: tokens in their
// byte-mapped form, added tokens as control (special) or user-defined, ids with no token unused,
// the merges in rank order, and the pre-tokenizer named by its regex.
Result<TokenizerVocabulary> HfBpeTokenizer::Vocabulary() const {
  TokenizerVocabulary v;
  v.model = "gpt2";
  v.pre = pattern_ == Pattern::kQwen2    ? "qwen2"
          : pattern_ == Pattern::kLlama3 ? "llama-bpe"
                                         : "gpt-2";
  v.tokens = id_to_token_;
  v.types.assign(id_to_token_.size(), TokenizerVocabulary::kNormal);
  for (size_t i = 0; i < id_to_token_.size(); ++i) {
    if (id_to_token_[i].empty()) v.types[i] = TokenizerVocabulary::kUnused;
  }
  for (const AddedToken& a : added_) {
    v.types[static_cast<size_t>(a.id)] =
        a.special ? TokenizerVocabulary::kControl : TokenizerVocabulary::kUserDefined;
  }
  std::vector<std::pair<int32_t, std::pair<int32_t, int32_t>>> by_rank;  // rank, (left, right)
  by_rank.reserve(merges_.size());
  for (const auto& [pair, merged] : merges_) by_rank.push_back({merged.first, pair});
  std::sort(by_rank.begin(), by_rank.end());
  v.merges.reserve(by_rank.size());
  for (const auto& [rank, pair] : by_rank) {
    v.merges.push_back(id_to_token_[static_cast<size_t>(pair.first)] + " " +
                       id_to_token_[static_cast<size_t>(pair.second)]);
  }
  v.add_space_prefix = add_prefix_space_;
  return v;
}

// The tokenizer.json "pre_tokenizer" for llama.cpp's pre-tokenizer name, null when unsupported.
json PreTokenizerJson(std::string_view pre, bool add_prefix_space) {
  const auto byte_level = [](bool prefix, bool use_regex) {
    return json{{"type", "ByteLevel"},
                {"add_prefix_space", prefix},
                {"trim_offsets", use_regex},
                {"use_regex", use_regex}};
  };
  if (pre == "gpt-2" || pre == "olmo") return byte_level(add_prefix_space, true);
  const std::string_view regex = pre == "qwen2"       ? kQwen2Pattern
                                 : pre == "llama-bpe" ? kLlama3Pattern
                                                      : std::string_view();
  if (regex.empty()) return json();
  return json{{"type", "Sequence"},
              {"pretokenizers", json::array({json{{"type", "Split"},
                                                  {"pattern", {{"Regex", std::string(regex)}}},
                                                  {"behavior", "Isolated"},
                                                  {"invert", false}},
                                             byte_level(add_prefix_space, false)})}};
}

}  // namespace

Result<std::string> HfTokenizerJson(const TokenizerVocabulary& v, const std::string& source) {
  if (v.model != "gpt2") {
    return InvalidArgumentError(source +
                                ": a tokenizer.json is written for a \"gpt2\" (byte-level "
                                "BPE) vocabulary, not " +
                                Quote(v.model));
  }
  const json pre = PreTokenizerJson(v.pre, v.add_space_prefix);
  if (pre.is_null()) {
    return UnimplementedError(source + ": tokenizer.ggml.pre " + Quote(v.pre) +
                              " is not supported (gpt-2, olmo, qwen2 or llama-bpe); its split "
                              "rules have no tokenizer.json form here");
  }
  if (v.types.size() != v.tokens.size()) {
    return InvalidArgumentError(source + ": " + std::to_string(v.tokens.size()) + " tokens but " +
                                std::to_string(v.types.size()) + " token types");
  }
  // model.vocab (a std::map keyed by token, so written in token order, which readers ignore).
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const int32_t type = v.types[id];
    if (type == TokenizerVocabulary::kUnused) continue;
    const std::string& token = v.tokens[id];
    if (token.empty() || !IsValidUtf8(token)) {
      return InvalidArgumentError(source + ": token " + std::to_string(id) + " (" + Quote(token) +
                                  ") is empty or not valid UTF-8");
    }
    if (const auto [it, fresh] = vocab.emplace(token, id); !fresh) {
      return InvalidArgumentError(source + ": token " + std::to_string(id) + " (" + Quote(token) +
                                  ") repeats token " + std::to_string(it->get<size_t>()));
    }
    if (type == TokenizerVocabulary::kControl || type == TokenizerVocabulary::kUserDefined) {
      added.push_back({{"id", id},
                       {"content", token},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == TokenizerVocabulary::kControl}});
    }
  }
  json merges = json::array();
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    const size_t space = m.find(' ');
    const bool two = space != std::string::npos && m.find(' ', space + 1) == std::string::npos;
    if (!two || !IsValidUtf8(m) || !vocab.contains(m.substr(0, space)) ||
        !vocab.contains(m.substr(space + 1)) ||
        !vocab.contains(m.substr(0, space) + m.substr(space + 1))) {
      return InvalidArgumentError(source + ": merge " + std::to_string(r) + " (" + Quote(m) +
                                  ") is not two tokens, separated by one space, whose "
                                  "concatenation is a token");
    }
    merges.push_back(m);
  }
  nlohmann::ordered_json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = added;
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = pre;
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"},
                     {"add_prefix_space", true},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", v.pre == "llama-bpe"},
                   {"vocab", vocab},
                   {"merges", merges}};
  return root.dump(2);
}

Result<std::unique_ptr<Tokenizer>> ParseHfTokenizerJson(std::string_view json_text,
                                                        const std::string& source) {
  return HfBpeTokenizer::Parse(json_text, source);
}

}  // namespace sy
