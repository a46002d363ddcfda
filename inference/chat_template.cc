#include "inference/chat_template.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <utility>

#include "inference/gguf_model.h"
#include "inference/gguf_tokenizer.h"
#include "inference/tokenizer_config.h"
#include "inference/tool_calls.h"
#include "runtime/core/read_file.h"
#include "storage/formats/text_file.h"

namespace sy {
namespace {

constexpr size_t kMaxConfigBytes = 64u << 20;  // a tokenizer_config.json with a large vocabulary

}  // namespace

Result<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string bos_token,
                                         std::string eos_token) {
  SY_ASSIGN_OR_RETURN(JinjaTemplate jinja, JinjaTemplate::Parse(source));
  return ChatTemplate(std::move(jinja), std::move(bos_token), std::move(eos_token),
                      TemplateUsesHermesToolCalls(source));
}

Result<ChatTemplate> ChatTemplate::Load(const std::string& dir) {
  namespace fs = std::filesystem;
  const bool gguf = IsGgufPath(dir);
  // A GGUF's tokenizer.chat_template and special tokens, as the tokenizer_config.json they stand
  // for (inference/gguf_tokenizer.h).
  const std::string config_path = gguf ? dir + " (tokenizer.chat_template)"
                                       : (fs::path(dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  std::error_code ec;
  nlohmann::json config = nlohmann::json::object();
  if (gguf) {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<storage::GgufFile> file, storage::GgufFile::Open(dir));
    SY_ASSIGN_OR_RETURN(auto files, GgufTokenizerFiles(file->header(), dir));
    if (const auto it = files.find("tokenizer_config.json"); it != files.end()) {
      SY_ASSIGN_OR_RETURN(config,
                          storage::ParseStrictJson(it->second, dir, "tokenizer_config.json"));
    }
  } else if (fs::exists(config_path, ec)) {
    SY_ASSIGN_OR_RETURN(std::string text,
                        ReadFile(config_path, kMaxConfigBytes, "tokenizer_config.json"));
    SY_ASSIGN_OR_RETURN(config,
                        storage::ParseStrictJson(text, config_path, "tokenizer_config.json"));
    if (!config.is_object()) {
      return InvalidArgumentError(config_path + ": tokenizer_config.json is not a JSON object");
    }
  }
  std::string source;
  SY_ASSIGN_OR_RETURN(std::optional<std::string> from_config,
                      ChatTemplateSource(config, config_path));
  if (from_config) {
    source = std::move(*from_config);
  } else if (fs::exists(jinja_path, ec)) {
    SY_ASSIGN_OR_RETURN(source, ReadFile(jinja_path, kMaxConfigBytes, "chat_template.jinja"));
  } else {
    return NotFoundError(dir +
                         " has no chat template (no \"chat_template\" in tokenizer_config.json "
                         "and no chat_template.jinja); use /v1/completions with a prompt");
  }
  Result<ChatTemplate> parsed = Parse(source, SpecialTokenText(config, "bos_token").value_or(""),
                                      SpecialTokenText(config, "eos_token").value_or(""));
  if (!parsed.ok()) {
    return Status(parsed.status().code(), config_path + ": " + parsed.status().message());
  }
  parsed->unk_token_ = SpecialTokenText(config, "unk_token").value_or("");
  parsed->pad_token_ = SpecialTokenText(config, "pad_token").value_or("");
  return parsed;
}

Result<std::string> ChatTemplate::Render(std::span<const ChatMessageText> messages,
                                         bool add_generation_prompt, const nlohmann::json& kwargs,
                                         const nlohmann::ordered_json& tools) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (!kwargs.is_null()) {
    if (!kwargs.is_object()) {
      return InvalidArgumentError("chat_template_kwargs must be an object of template variables");
    }
    for (const auto& [name, value] : kwargs.items()) {
      if (name == "messages" || name == "add_generation_prompt" || name == "bos_token" ||
          name == "eos_token" || name == "unk_token" || name == "pad_token" ||
          (name == "tools" && !tools.is_null())) {
        return InvalidArgumentError("chat_template_kwargs." + name +
                                    " is set by the server; choose another variable");
      }
      context[name] = nlohmann::ordered_json::parse(value.dump());
    }
  }
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessageText& m : messages) {
    nlohmann::ordered_json message = {{"role", m.role}, {"content", m.content}};
    if (m.fields.is_object()) {
      for (const auto& [name, value] : m.fields.items()) message[name] = value;
    }
    list.push_back(std::move(message));
  }
  context["messages"] = std::move(list);
  if (!tools.is_null()) context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  if (!unk_token_.empty()) context["unk_token"] = unk_token_;
  if (!pad_token_.empty()) context["pad_token"] = pad_token_;
  return jinja_.Render(context);
}

}  // namespace sy
