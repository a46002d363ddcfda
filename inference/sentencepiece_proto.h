// A SentencePiece model file (tokenizer.model: a serialized sentencepiece.ModelProto) written from
// a TokenizerVocabulary, so that a vocabulary known only by its pieces (a GGUF's tokenizer.ggml.*
// keys, model "llama") is run by libsentencepiece (ParseSentencePieceModel) and can be saved as a
// Hugging Face tokenizer.model.
//
// The model is what llama.cpp runs for a "llama" vocabulary (llm_tokenizer_spm): SentencePiece's
// BPE algorithm over the pieces (merges by score), the identity normalizer (no NFKC, no collapsing
// of spaces), spaces escaped as U+2581, a dummy prefix space when add_space_prefix, byte fallback
// when the vocabulary has byte pieces (<0x00> ... <0xFF>). A Unigram model's pieces and scores
// become a BPE model: the GGUF keeps no model type, and llama.cpp runs every "llama" vocabulary
// the BPE way.
//
// Fields written (sentencepiece_model.proto): pieces {piece 1, score 2, type 3}; trainer_spec
// {model_type 3 = BPE, vocab_size 4, byte_fallback 35, unk/bos/eos/pad ids 40-43 and pieces
// 45-48}; normalizer_spec {name 1 = "identity", add_dummy_prefix 3, remove_extra_whitespaces 4 =
// false, escape_whitespaces 5 = true}. llama_token_type numbers are sentencepiece's piece types.
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "inference/tokenizer.h"

namespace sy {

// `vocab` must have model "llama" and tokens, scores and types of equal length (SY_CHECK: the
// caller validates untrusted input first). The bytes of the model; libsentencepiece's own checks
// (an unknown piece present, no duplicate pieces) apply when it is loaded.
std::string SentencePieceModelProto(const TokenizerVocabulary& vocab);

}  // namespace sy
