// ChatTemplate: turns chat messages into the prompt text a chat model was trained on, with the
// model's own template: the "chat_template" of its tokenizer_config.json (or a chat_template.jinja
// beside it), rendered by inference/jinja_template.h as transformers' apply_chat_template renders
// it: variables `messages` (a list of {"role", "content"} with a message's other fields:
// tool_calls, tool_call_id, name), `add_generation_prompt`, `tools` when given (the OpenAI API's
// list of functions), and the tokenizer's special tokens `bos_token`, `eos_token`, `unk_token`,
// `pad_token` as text. The result is encoded without adding special tokens (the template writes
// them).
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
  // More fields of the message, as the template sees them (an assistant's tool_calls, a tool
  // message's tool_call_id); null: none.
  nlohmann::ordered_json fields;
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
  // `tools` (null, or the API's array of {"type": "function", "function": {...}}) is the template's
  // `tools`, its members in the order given.
  Result<std::string> Render(std::span<const ChatMessageText> messages, bool add_generation_prompt,
                             const nlohmann::json& kwargs = nullptr,
                             const nlohmann::ordered_json& tools = nullptr) const;
  // Whether the template asks for tool calls as <tool_call> blocks (inference/tool_calls.h).
  bool uses_hermes_tool_calls() const { return hermes_tool_calls_; }

  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate(JinjaTemplate jinja, std::string bos, std::string eos, bool hermes_tool_calls)
      : jinja_(std::move(jinja)),
        bos_token_(std::move(bos)),
        eos_token_(std::move(eos)),
        hermes_tool_calls_(hermes_tool_calls) {}

  JinjaTemplate jinja_;
  std::string bos_token_, eos_token_, unk_token_, pad_token_;
  bool hermes_tool_calls_ = false;
};

}  // namespace sy
