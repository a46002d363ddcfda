#include "inference/tokenizer.h"

#include <utility>

#if SY_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>

#include "runtime/core/regular_file.h"
#endif

namespace sy {
namespace {

#if SY_HAVE_SENTENCEPIECE
class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string path) : path_(std::move(path)) {}

  Status Load() {
    // sentencepiece opens by name: a FIFO or a device there must not hang it.
    SY_RETURN_IF_ERROR(CheckRegularFile(path_));
    const auto status = processor_.Load(path_);
    if (!status.ok()) {
      return InvalidArgumentError(path_ + ": not a SentencePiece model (" + status.ToString() +
                                  ")");
    }
    return Status::Ok();
  }

  Status LoadFromBytes(std::string_view bytes) {
    const auto status = processor_.LoadFromSerializedProto(bytes);
    if (!status.ok()) {
      return InvalidArgumentError(path_ + ": not a SentencePiece model (" + status.ToString() +
                                  ")");
    }
    return Status::Ok();
  }

  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) return InvalidArgumentError(path_ + ": encode: " + status.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  Result<std::string> Decode(std::span<const int32_t> ids) const override {
    std::vector<int> v;
    for (const int32_t id : ids) {
      if (id < 0 || id >= processor_.GetPieceSize()) {
        return InvalidArgumentError(path_ + ": token id " + std::to_string(id) +
                                    " is not in the vocabulary of " +
                                    std::to_string(processor_.GetPieceSize()));
      }
      v.push_back(id);
    }
    std::string text;
    const auto status = processor_.Decode(v, &text);
    if (!status.ok()) return InvalidArgumentError(path_ + ": decode: " + status.ToString());
    return text;
  }

  int64_t vocab_size() const override { return processor_.GetPieceSize(); }

  // As llama.cpp's convert_hf_to_gguf.py (_create_vocab_sentencepiece) reads it: each piece, its
  // score and its kind (unknown, control, unused, byte, else normal).
  Result<TokenizerVocabulary> Vocabulary() const override {
    TokenizerVocabulary v;
    v.model = "llama";
    v.pre = "default";
    const int n = processor_.GetPieceSize();
    for (int id = 0; id < n; ++id) {
      v.tokens.push_back(processor_.IdToPiece(id));
      v.scores.push_back(processor_.GetScore(id));
      v.types.push_back(processor_.IsUnknown(id)   ? TokenizerVocabulary::kUnknown
                        : processor_.IsControl(id) ? TokenizerVocabulary::kControl
                        : processor_.IsUnused(id)  ? TokenizerVocabulary::kUnused
                        : processor_.IsByte(id)    ? TokenizerVocabulary::kByte
                                                   : TokenizerVocabulary::kNormal);
    }
    // add_dummy_prefix lives in the model's NormalizerSpec, which the public API does not show;
    // its effect does: the first piece of an encoded word starts with U+2581 exactly when the
    // normalizer put a space before the text.
    std::vector<std::string> pieces;
    if (!processor_.Encode("x", &pieces).ok()) {
      return InternalError(path_ + ": cannot encode \"x\"");
    }
    v.add_space_prefix = !pieces.empty() && pieces[0].rfind("\xE2\x96\x81", 0) == 0;
    v.bos_id = processor_.bos_id();
    v.eos_id = processor_.eos_id();
    v.unk_id = processor_.unk_id();
    v.pad_id = processor_.pad_id();
    return v;
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor processor_;
};
#endif

// Length of the UTF-8 character that starts with byte `b` (1 for a stray continuation byte).
size_t Utf8Length(unsigned char b) {
  if (b >= 0xf0) return 4;
  if (b >= 0xe0) return 3;
  if (b >= 0xc0) return 2;
  return 1;
}

// The length of the well-formed UTF-8 character at bytes[i], 0 when there is none.
size_t ValidUtf8Length(std::string_view bytes, size_t i) {
  const auto b = static_cast<unsigned char>(bytes[i]);
  const size_t len = b < 0x80             ? 1
                     : (b & 0xe0) == 0xc0 ? 2
                     : (b & 0xf0) == 0xe0 ? 3
                     : (b & 0xf8) == 0xf0 ? 4
                                          : 0;
  bool ok = len > 0 && i + len <= bytes.size();
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1f) : len == 3 ? (b & 0x0f) : (b & 0x07);
  for (size_t k = 1; ok && k < len; ++k) {
    const auto c = static_cast<unsigned char>(bytes[i + k]);
    ok = (c & 0xc0) == 0x80;
    cp = (cp << 6) | (c & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  ok = ok && cp >= kMin[len] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
  return ok ? len : 0;
}

// `bytes` with each byte that does not start a well-formed UTF-8 character replaced by U+FFFD,
// as the tokenizers library's lossy decode shows a broken byte sequence.
std::string ReplaceInvalidUtf8(std::string_view bytes) {
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    if (const size_t len = ValidUtf8Length(bytes, i); len > 0) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t len = ValidUtf8Length(bytes, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

#if !SY_HAVE_ICU
Result<std::unique_ptr<Tokenizer>> ParseHfTokenizerJson(std::string_view,
                                                        const std::string& source) {
  return UnavailableError(source +
                          ": this build has no ICU, which tokenizer.json needs; install libicu-dev "
                          "(scripts/install-deps.sh) and rebuild, or pass --prompt-ids");
}
Result<std::string> HfTokenizerJson(const TokenizerVocabulary&, const std::string& source) {
  return UnavailableError(source +
                          ": this build has no ICU, which a byte-level BPE tokenizer needs; "
                          "install libicu-dev (scripts/install-deps.sh) and rebuild");
}
#endif

Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
#if SY_HAVE_SENTENCEPIECE
  auto tok = std::make_unique<SentencePieceTokenizer>(path);
  SY_RETURN_IF_ERROR(tok->Load());
  return std::unique_ptr<Tokenizer>(std::move(tok));
#else
  return UnavailableError(path +
                          ": this build has no libsentencepiece; install libsentencepiece-dev "
                          "(scripts/install-deps.sh) and rebuild, or pass --prompt-ids");
#endif
}

Result<std::unique_ptr<Tokenizer>> ParseSentencePieceModel(std::string_view bytes,
                                                           const std::string& source) {
#if SY_HAVE_SENTENCEPIECE
  auto tok = std::make_unique<SentencePieceTokenizer>(source);
  SY_RETURN_IF_ERROR(tok->LoadFromBytes(bytes));
  return std::unique_ptr<Tokenizer>(std::move(tok));
#else
  (void)bytes;
  return UnavailableError(source +
                          ": this build has no libsentencepiece; install libsentencepiece-dev "
                          "(scripts/install-deps.sh) and rebuild");
#endif
}

Result<std::string> TextStreamer::Append(int32_t id) {
  ids_.push_back(id);
  SY_ASSIGN_OR_RETURN(std::string text, tokenizer_.Decode(ids_));
  if (text.size() < emitted_) {  // a decoder that rewrote its past output: emit nothing new
    return std::string();
  }
  // Hold back a trailing character whose bytes are not all there yet.
  size_t end = text.size();
  for (size_t back = 1; back <= 3 && back <= end - emitted_; ++back) {
    const auto b = static_cast<unsigned char>(text[end - back]);
    if ((b & 0xc0) == 0x80) continue;  // continuation byte: look further back
    if (Utf8Length(b) > back) end -= back;
    break;
  }
  std::string fresh = ReplaceInvalidUtf8(std::string_view(text).substr(emitted_, end - emitted_));
  emitted_ = end;
  return fresh;
}

std::string TextStreamer::Finish() {
  Result<std::string> text = tokenizer_.Decode(ids_);
  if (!text.ok() || text->size() <= emitted_) return std::string();
  std::string rest = ReplaceInvalidUtf8(std::string_view(*text).substr(emitted_));
  emitted_ = text->size();
  return rest;
}

}  // namespace sy
