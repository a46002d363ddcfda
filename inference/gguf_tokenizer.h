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
//                                 config.json's *_token_id, else the SentencePiece model's own
//   tokenizer.ggml.add_bos_token / add_eos_token        tokenizer_config.json's, when it says
//   tokenizer.ggml.add_space_prefix                     SentencePiece: whether the model puts a
//                                 space before the text (its add_dummy_prefix)
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

}  // namespace sy
