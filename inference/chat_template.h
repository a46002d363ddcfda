// ChatTemplate: turns chat messages into the prompt text a chat model was trained on, with the
// model's own template: the "chat_template" of its tokenizer_config.json (or a chat_template.jinja
// beside it), rendered by inference/jinja_template.h as transformers' apply_chat_template renders
// it: variables `messages` (a list of {"role", "content"}), `add_generation_prompt`, and the
// tokenizer's special tokens `bos_token`, `eos_token`, `unk_token`, `pad_token` as text. The
// result is encoded without adding special tokens (the template writes them).
//
// Checked against transformers itself on the templates of the five families this project loads
// (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-MoE): tests/inference/chat_template_oracle.py.
//
// Ownership: a value; copies share the parsed template. Thread-safety: Render is const and safe
// from several threads at once.
#pragma once

#include <nlohmann/json.hpp>

#include <span>
#include <string>
#include <string_view>

#include "inference/jinja_template.h"
#include "runtime/core/status.h"

namespace sy {

struct ChatMessageText {
  std::string role;  // system, user, assistant, ...
  std::string content;
};

class ChatTemplate {
 public:
  // From a model directory. NotFound (saying the model has no chat template) when the directory
  // has neither a tokenizer_config.json with a "chat_template" nor a chat_template.jinja;
  // InvalidArgument when the file or the template does not parse. A "chat_template" given as a
  // list of {"name", "template"} uses the one named "default". A GGUF file instead of a directory:
  // its tokenizer.chat_template and special tokens (inference/gguf_tokenizer.h).
  static Result<ChatTemplate> Load(const std::string& dir);
  // From the template text and the special tokens' text.
  static Result<ChatTemplate> Parse(std::string_view source, std::string bos_token,
                                    std::string eos_token);

  // The prompt for `messages`; with `add_generation_prompt`, ending with the header of the
  // assistant's turn. `kwargs` (null, or a JSON object) adds template variables, as
  // apply_chat_template's keyword arguments do (Qwen3's enable_thinking); they may not take the
  // names above. InvalidArgument with the template's own message when it raises (roles that do
  // not alternate, a role it does not know) or uses what the renderer does not support.
  Result<std::string> Render(std::span<const ChatMessageText> messages, bool add_generation_prompt,
                             const nlohmann::json& kwargs = nullptr) const;

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate(JinjaTemplate jinja, std::string bos, std::string eos)
      : jinja_(std::move(jinja)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}

  JinjaTemplate jinja_;
  std::string bos_token_, eos_token_, unk_token_, pad_token_;
};

}  // namespace sy
