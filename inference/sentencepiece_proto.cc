#include "inference/sentencepiece_proto.h"

#include <cstdint>
#include <cstring>
#include <string_view>

#include "runtime/core/check.h"

namespace sy {
namespace {

void Varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    *out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *out += static_cast<char>(v);
}

void Key(int field, int wire, std::string* out) {
  Varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire), out);
}

// Varint field; a negative int32 is sign-extended to 64 bits, as protobuf encodes it.
void IntField(int field, int64_t v, std::string* out) {
  Key(field, 0, out);
  Varint(static_cast<uint64_t>(v), out);
}

void BytesField(int field, std::string_view bytes, std::string* out) {
  Key(field, 2, out);
  Varint(bytes.size(), out);
  out->append(bytes);
}

void FloatField(int field, float v, std::string* out) {
  Key(field, 5, out);
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  for (int k = 0; k < 4; ++k) *out += static_cast<char>((bits >> (8 * k)) & 0xff);
}

}  // namespace

std::string SentencePieceModelProto(const TokenizerVocabulary& vocab) {
  SY_CHECK(vocab.model == "llama")
      << "SentencePieceModelProto of a " << vocab.model << " vocabulary";
  SY_CHECK(vocab.scores.size() == vocab.tokens.size() && vocab.types.size() == vocab.tokens.size())
      << "tokens, scores and types differ in length";
  std::string proto;
  bool byte_fallback = false;
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    std::string piece;
    BytesField(1, vocab.tokens[i], &piece);
    FloatField(2, vocab.scores[i], &piece);
    // Type 0 (llama.cpp's "undefined") is a normal piece.
    IntField(3, vocab.types[i] == 0 ? TokenizerVocabulary::kNormal : vocab.types[i], &piece);
    BytesField(1, piece, &proto);
    byte_fallback = byte_fallback || vocab.types[i] == TokenizerVocabulary::kByte;
  }
  auto piece_of = [&](int32_t id) -> std::string_view {
    return id >= 0 && static_cast<size_t>(id) < vocab.tokens.size()
               ? std::string_view(vocab.tokens[static_cast<size_t>(id)])
               : std::string_view();
  };
  std::string trainer;
  IntField(3, 2, &trainer);  // model_type: BPE
  IntField(4, static_cast<int64_t>(vocab.tokens.size()), &trainer);
  IntField(35, byte_fallback ? 1 : 0, &trainer);
  const int32_t ids[] = {vocab.unk_id, vocab.bos_id, vocab.eos_id, vocab.pad_id};
  for (int k = 0; k < 4; ++k) IntField(40 + k, ids[k], &trainer);
  for (int k = 0; k < 4; ++k) {
    // An id the model does not have keeps sentencepiece's default piece (<unk>, <s>, </s>,
    // <pad>), which then names no piece of the vocabulary either.
    if (!piece_of(ids[k]).empty()) BytesField(45 + k, piece_of(ids[k]), &trainer);
  }
  BytesField(2, trainer, &proto);
  std::string normalizer;
  BytesField(1, "identity", &normalizer);
  IntField(3, vocab.add_space_prefix ? 1 : 0, &normalizer);
  IntField(4, 0, &normalizer);
  IntField(5, 1, &normalizer);
  BytesField(3, normalizer, &proto);
  return proto;
}

}  // namespace sy
