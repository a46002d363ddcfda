// The tokens that end a model's answer, as its Hugging Face directory says:
// generation_config.json's "eos_token_id" (an id or a list of ids: chat models often list the end
// of a turn too), else config.json's, else tokenizer_config.json's "eos_token" text encoded by the
// tokenizer as one token. A directory that says none of these (a training checkpoint, the quick
// start's model) has none: its answers end at their length limit. A GGUF file: its
// tokenizer.ggml.eos_token_id (inference/gguf_tokenizer.h).
//
// Ownership: values. Thread-safety: pure functions of the files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inference/tokenizer.h"
#include "runtime/core/status.h"

namespace sy {

// The end-of-sequence ids of the model in `dir` (empty when it names none), each checked against
// `vocab_size`. `tokenizer` may be null (then tokenizer_config.json's text is not looked at).
// InvalidArgument naming the file for a malformed id.
Result<std::vector<int32_t>> LoadEosTokenIds(const std::string& dir, const Tokenizer* tokenizer,
                                             int64_t vocab_size);

}  // namespace sy
