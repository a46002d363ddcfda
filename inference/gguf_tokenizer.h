// The tokenizer metadata of a GGUF (tokenizer.ggml.*), made from a Hugging Face model's tokenizer
// files, so that llama.cpp (llama-cli, llama-simple, llama-server) can tokenize for a GGUF that
// `switchyard convert` writes.
//
// The keys are the ones llama.cpp's convert_hf_to_gguf.py writes:
//   tokenizer.ggml.model          "llama" from tokenizer.model (SentencePiece; preferred, as the
//                                 converter prefers it for Mixtral), else "gpt2" from
//                                 tokenizer.json (byte-level BPE)
//   tokenizer.ggml.pre            "default" (SentencePiece); "gpt-2", "qwen2" or "llama-bpe" by the
//                                 BPE's split regex
//   tokenizer.ggml.tokens         every id up to the model's vocab_size; an id the tokenizer
//                                 lacks is "[PAD<id>]" of type unused, as the converter pads
//   tokenizer.ggml.scores         SentencePiece only (padding: -10000)
//   tokenizer.ggml.token_type     llama_token_type: 1 normal, 2 unknown, 3 control, 4 user-defined,
//                                 5 unused, 6 byte
//   tokenizer.ggml.merges         BPE only, in rank order
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id   from tokenizer_config.json's
//                                 {bos,eos,unk,pad}_token (looked up among the tokens), else
//                                 config.json's *_token_id, else the SentencePiece model's own;
//                                 none when tokenizer_config.json says null
//   tokenizer.ggml.add_bos_token / add_eos_token        tokenizer_config.json's, when it says
//   tokenizer.ggml.add_space_prefix                     SentencePiece: whether the model puts a
//                                 space before the text (its add_dummy_prefix)
//   tokenizer.chat_template       tokenizer_config.json's chat_template (a string, or the list's
//                                 template named "default")
//
// And back: GgufTokenizerFiles reads those keys from a GGUF (any GGUF: llama.cpp's converter's
// too) into the Hugging Face files that stand for them, and LoadGgufTokenizer runs them, so that
// `generate --prompt`, `perplexity --text`, `tokenize` and `serve` work on a .gguf:
//   "gpt2"  -> tokenizer.json (HfTokenizerJson: the pre-tokenizer by tokenizer.ggml.pre; unused ids
//              left out, so a GGUF -> GGUF trip writes them back as "[PAD<id>]")
//   "llama" -> tokenizer.model (SentencePieceModelProto: the pieces, scores and types as they are;
//              llama.cpp's SentencePiece BPE, identity normalizer, add_space_prefix (default true,
//              as llama.cpp's), byte fallback when there are byte pieces)
//   both    -> tokenizer_config.json: tokenizer_class, {bos,eos,unk,pad}_token (the tokens of the
//              *_token_id keys), add_bos_token / add_eos_token (when the GGUF says), chat_template
//              and generation_config.json: {bos,eos,pad}_token_id, when the GGUF has them
// What a GGUF does not record cannot come back: a tokenizer.json normalizer (Qwen2's NFC: a text
// that is not in NFC may encode differently, as in llama.cpp), a SentencePiece Unigram model (run
// as BPE, as llama.cpp runs it), the unknown / byte types of a BPE's tokens (normal afterwards).
// The metadata is untrusted: every key's type, every array's length (tokens, scores and types
// agree), every id and token type, UTF-8, unique tokens and every merge are checked, and errors
// name the file and the key.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "inference/tokenizer.h"
#include "runtime/core/status.h"
#include "storage/formats/gguf.h"

namespace sy {

// `files` maps a Hugging Face side file's name (tokenizer.model, tokenizer.json,
// tokenizer_config.json, config.json) to its contents; `source` names the model in errors.
// Returns no keys when `files` has neither tokenizer.model nor tokenizer.json. Errors: a tokenizer
// that does not parse, one with more tokens than `vocab_size`, an unsupported tokenizer
// (Unimplemented, naming the field), or a build without the library it needs (Unavailable).
Result<std::vector<storage::GgufKeyValue>> GgufTokenizerMetadata(
    const std::map<std::string, std::string>& files, int64_t vocab_size, const std::string& source);

// The Hugging Face tokenizer files of `header`'s tokenizer metadata, by name (tokenizer.json or
// tokenizer.model, tokenizer_config.json, generation_config.json); empty when it has no
// tokenizer.ggml.model (or "none"). `file` names the GGUF in errors: InvalidArgument for malformed
// metadata, Unimplemented for a tokenizer model or pre-tokenizer this reader does not run.
Result<std::map<std::string, std::string>> GgufTokenizerFiles(const storage::GgufHeader& header,
                                                              const std::string& file);

// The tokenizer of `header`'s metadata; NotFound naming `file` when it has none.
Result<std::unique_ptr<Tokenizer>> GgufTokenizer(const storage::GgufHeader& header,
                                                 const std::string& file);

// Opens the GGUF at `path` and returns GgufTokenizer of it.
Result<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path);

}  // namespace sy
