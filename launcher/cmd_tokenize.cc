// `switchyard tokenize`: runs a model directory's tokenizer (inference/tokenizer.h), or a GGUF
// file's (its tokenizer.ggml.* metadata, inference/gguf_tokenizer.h).
//
//   switchyard tokenize --model DIR --text "..."       prints the ids, comma-separated
//   switchyard tokenize --model DIR --decode 1,2,3     prints the text
//   switchyard tokenize --model DIR --texts FILE       FILE: a JSON array of strings; prints
//                                                      {"ids": [[...], ...], "decoded": [...]}
//   switchyard tokenize --model DIR --chat FILE        FILE: {"messages": [{"role", "content"},
//                                                      ...], "add_generation_prompt": true}; prints
//                                                      {"text": ..., "ids": [...]}, the prompt the
//                                                      model's chat template makes of them
// The --texts form (inference/tokenizer_round_trip.h) is what
// tests/inference/hf_tokenizer_oracle.py compares with the Hugging Face tokenizers library; the
// --chat form (inference/chat_template.h) is what chat_template_oracle.py compares with
// transformers' apply_chat_template.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inference/chat_template.h"
#include "inference/token_ids.h"
#include "inference/tokenizer.h"
#include "inference/tokenizer_round_trip.h"
#include "launcher/command.h"
#include "runtime/core/read_file.h"
#include "storage/formats/text_file.h"

namespace sy::launcher {
namespace {

class TokenizeCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", model_dir_,
                   "Directory with tokenizer.json or tokenizer.model, or a GGUF file")
        ->required();
    app.add_option("--text", text_, "Text to encode");
    app.add_option("--decode", decode_, "Token ids to decode, comma-separated");
    app.add_option("--texts", texts_file_, "JSON array of strings to encode and decode back");
    app.add_option("--chat", chat_file_,
                   "JSON {\"messages\": [...], \"add_generation_prompt\": true, "
                   "\"chat_template_kwargs\": {...}}: render it with the model's chat template and "
                   "encode it");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_ASSIGN_OR_RETURN(auto tok, LoadTokenizer(model_dir_));
    if (!decode_.empty()) {
      SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseTokenIds(decode_, "--decode"));
      SY_ASSIGN_OR_RETURN(std::string text, tok->Decode(ids));
      std::printf("%s\n", text.c_str());
      return Status::Ok();
    }
    if (!texts_file_.empty()) {
      SY_ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadTextList(texts_file_));
      SY_ASSIGN_OR_RETURN(std::vector<TokenizedText> done, RoundTripTexts(*tok, texts));
      nlohmann::json out = {{"ids", nlohmann::json::array()}, {"decoded", nlohmann::json::array()}};
      for (const TokenizedText& t : done) {
        out["ids"].push_back(t.ids);
        out["decoded"].push_back(t.decoded);
      }
      std::printf("%s\n",
                  out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      return Status::Ok();
    }
    if (!chat_file_.empty()) return RenderChat(*tok);
    SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(text_));
    std::printf("%s\n", FormatTokenIds(ids).c_str());
    return Status::Ok();
  }

  Status RenderChat(const Tokenizer& tok) {
    SY_ASSIGN_OR_RETURN(ChatTemplate chat, ChatTemplate::Load(model_dir_));
    SY_ASSIGN_OR_RETURN(std::string text, ReadFile(chat_file_, 64u << 20, "--chat"));
    SY_ASSIGN_OR_RETURN(nlohmann::json root, storage::ParseStrictJson(text, chat_file_, "--chat"));
    if (!root.is_object() || !root.contains("messages") || !root["messages"].is_array()) {
      return InvalidArgumentError(chat_file_ + ": expected {\"messages\": [...]}");
    }
    std::vector<ChatMessageText> messages;
    for (const nlohmann::json& m : root["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
          !m.contains("content") || !m["content"].is_string()) {
        return InvalidArgumentError(chat_file_ + ": a message without a role and content string");
      }
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>(), {}});
    }
    const bool add = root.value("add_generation_prompt", true);
    SY_ASSIGN_OR_RETURN(
        std::string prompt,
        chat.Render(messages, add, root.value("chat_template_kwargs", nlohmann::json())));
    SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(prompt));
    const nlohmann::json out = {{"text", prompt}, {"ids", ids}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return Status::Ok();
  }

  std::string model_dir_;
  std::string text_;
  std::string decode_;
  std::string texts_file_;
  std::string chat_file_;
};

}  // namespace

SY_REGISTER_COMMAND("tokenize", "Encode or decode text with a model directory's tokenizer",
                    TokenizeCommand);

}  // namespace sy::launcher
