// What a tokenizer_config.json says beside the tokenizer itself: the chat template and the special
// tokens' text, read the way transformers reads them. One reading, shared by the chat template
// (inference/chat_template.h), the GGUF tokenizer metadata (inference/gguf_tokenizer.h) and the
// stop tokens (inference/generation_config.h).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace sy {

// The template text of "chat_template": a string, or, of a list of {"name", "template"}, the one
// named "default". nullopt when the key is absent or null; InvalidArgument naming `where` (the
// file) when the value is neither a string nor such a list.
Result<std::optional<std::string>> ChatTemplateSource(const nlohmann::json& tokenizer_config,
                                                      const std::string& where);

// The text of a special token such as "eos_token": a string, or an AddedToken object's "content".
// nullopt when the key is absent or holds anything else.
std::optional<std::string> SpecialTokenText(const nlohmann::json& tokenizer_config,
                                            std::string_view key);

}  // namespace sy
