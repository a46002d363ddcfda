// `switchyard tokenize`: runs a model directory's tokenizer (inference/tokenizer.h).
//
//   switchyard tokenize --model DIR --text "..."       prints the ids, comma-separated
//   switchyard tokenize --model DIR --decode 1,2,3     prints the text
//   switchyard tokenize --model DIR --texts FILE       FILE: a JSON array of strings; prints
//                                                      {"ids": [[...], ...], "decoded": [...]}
// The --texts form is what tests/inference/hf_tokenizer_oracle.py compares with the Hugging Face
// tokenizers library.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inference/tokenizer.h"
#include "launcher/command.h"
#include "storage/formats/text_file.h"

namespace sy::launcher {
namespace {

std::string JoinIds(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

class TokenizeCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", model_dir_, "Directory with tokenizer.json or tokenizer.model")
        ->required();
    app.add_option("--text", text_, "Text to encode");
    app.add_option("--decode", decode_, "Token ids to decode, comma-separated");
    app.add_option("--texts", texts_file_, "JSON array of strings to encode and decode back");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_ASSIGN_OR_RETURN(auto tok, LoadTokenizer(model_dir_));
    if (!decode_.empty()) {
      std::vector<int32_t> ids;
      size_t begin = 0;
      while (begin <= decode_.size()) {
        size_t comma = decode_.find(',', begin);
        if (comma == std::string::npos) comma = decode_.size();
        try {
          ids.push_back(std::stoi(decode_.substr(begin, comma - begin)));
        } catch (const std::exception&) {
          return InvalidArgumentError("--decode: \"" + decode_.substr(begin, comma - begin) +
                                      "\" is not a token id");
        }
        begin = comma + 1;
      }
      SY_ASSIGN_OR_RETURN(std::string text, tok->Decode(ids));
      std::printf("%s\n", text.c_str());
      return Status::Ok();
    }
    if (!texts_file_.empty()) {
      SY_ASSIGN_OR_RETURN(std::string text,
                          storage::ReadTextFile(texts_file_, size_t{64} << 20, "JSON text list"));
      SY_ASSIGN_OR_RETURN(nlohmann::json list,
                          storage::ParseStrictJson(text, texts_file_, "the text list"));
      if (!list.is_array()) return InvalidArgumentError(texts_file_ + ": not a JSON array");
      nlohmann::json out = {{"ids", nlohmann::json::array()}, {"decoded", nlohmann::json::array()}};
      for (const auto& item : list) {
        if (!item.is_string()) return InvalidArgumentError(texts_file_ + ": not all strings");
        SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(item.get<std::string>()));
        SY_ASSIGN_OR_RETURN(std::string back, tok->Decode(ids));
        out["ids"].push_back(ids);
        out["decoded"].push_back(back);
      }
      std::printf("%s\n",
                  out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      return Status::Ok();
    }
    SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(text_));
    std::printf("%s\n", JoinIds(ids).c_str());
    return Status::Ok();
  }

  std::string model_dir_;
  std::string text_;
  std::string decode_;
  std::string texts_file_;
};

}  // namespace

SY_REGISTER_COMMAND("tokenize", "Encode or decode text with a model directory's tokenizer",
                    TokenizeCommand);

}  // namespace sy::launcher
