// `switchyard chat`: an interactive chat with a model, through its chat template, as llama.cpp's
// `llama-cli -cnv`. Each line typed is a user message; the answer streams to stdout as it is drawn
// and joins the conversation, which is rendered whole through the template for the next turn.
//
//   switchyard chat -m|--model DIR|FILE.gguf [--system "text"] [-n|--max-tokens N
//                   -c|--ctx-size N --temperature T --top-k K --top-p P -s|--seed S]
//                   [--device cpu --dtype bf16 -t|--threads N --policy NAME ...]
//
// Commands on a line of their own: /exit (or end of input) ends the chat, /reset starts a new
// conversation (keeping --system). A prompt "> " goes to stderr before each line, so stdout holds
// the answers alone, one per line. An answer ends at the model's end-of-sequence token, at -n
// tokens, or when the context (-c, default the model's up to 4096) is full; a conversation past
// the context is refused with a message naming /reset and -c, and the chat goes on.
#include <fmt/printf.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inference/chat_template.h"
#include "inference/generate_engine.h"
#include "inference/generation_config.h"
#include "inference/tokenizer.h"
#include "launcher/command.h"
#include "launcher/inference_session.h"

namespace sy::launcher {
namespace {

class ChatCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    AddInferenceOptions(app, &options_, &flags_);
    app.add_option("--system", system_, "A system message that opens the conversation");
    app.add_option("-n,--max-tokens", max_tokens_,
                   "Tokens per answer at most (default 0: until the end of sequence or the "
                   "context is full)")
        ->check(IntegerRange(0, 1 << 24));
    app.add_option("-c,--ctx-size", ctx_size_,
                   "Tokens of context for the whole conversation (default 0: the model's own, "
                   "at most 4096)")
        ->check(IntegerRange(0, 1 << 24));
    AddSamplingOptions(app, &sampler_);
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SamplerOptions check = sampler_;
    check.max_new_tokens = 1;
    SY_RETURN_IF_ERROR(ValidateSamplerOptions(check));
    SY_RETURN_IF_ERROR(ParseInferenceFlags(flags_, &options_));
    options_.tokenizer = true;
    SY_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::Load(options_.model_path));
    SY_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session,
                        InferenceSession::Open(options_));
    std::fprintf(stderr, "loaded %s: %s\n", session->path().c_str(), session->Describe().c_str());
    const Tokenizer* tokenizer = session->tokenizer();
    if (tokenizer == nullptr) {
      return InvalidArgumentError(options_.model_path + " has no tokenizer to chat with");
    }
    const int64_t trained = session->trained_context();
    const int64_t context = OpenEndedContext(ctx_size_, trained);
    SY_ASSIGN_OR_RETURN(
        std::vector<int32_t> eos,
        LoadEosTokenIds(options_.model_path, tokenizer, session->model().config().vocab_size));
    if (eos.empty()) {
      spdlog::warn("{}", fmt::sprintf("%s names no end-of-sequence token; each answer runs to -n "
                                      "or the context",
                                      options_.model_path.c_str()));
    }
    SY_ASSIGN_OR_RETURN(
        std::unique_ptr<GenerateEngine> engine,
        GenerateEngine::Create(session->model(), &session->provider(),
                               EngineOptions{.max_batch = 1, .max_context = context}));
    std::fprintf(stderr, "chat: %lld tokens of context; /reset starts over, /exit ends\n",
                 static_cast<long long>(context));

    std::vector<ChatMessageText> conversation;
    if (!system_.empty()) conversation.push_back({"system", system_, {}});
    const size_t opening = conversation.size();
    std::string line;
    while (true) {
      std::fputs("> ", stderr);
      std::fflush(stderr);
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line == "/reset") {
        conversation.resize(opening);
        std::fputs("(a new conversation)\n", stderr);
        continue;
      }
      if (line.empty()) continue;
      conversation.push_back({"user", line, {}});
      Result<std::string> answer =
          Turn(*engine, chat_template, *tokenizer, conversation, context, eos);
      if (!answer.ok()) {
        conversation.pop_back();  // the turn did not happen
        if (answer.status().code() != StatusCode::kResourceExhausted) return answer.status();
        std::fprintf(stderr, "%s\n", answer.status().message().c_str());
        continue;
      }
      conversation.push_back({"assistant", *answer, {}});
    }
    return Status::Ok();
  }

  // Renders the conversation, streams the answer to stdout, and returns its text.
  Result<std::string> Turn(GenerateEngine& engine, const ChatTemplate& chat_template,
                           const Tokenizer& tokenizer,
                           const std::vector<ChatMessageText>& conversation, int64_t context,
                           const std::vector<int32_t>& eos) {
    SY_ASSIGN_OR_RETURN(std::string text,
                        chat_template.Render(conversation, /*add_generation_prompt=*/true));
    SY_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(text));
    const auto prompt_len = static_cast<int64_t>(ids.size());
    if (prompt_len >= context) {
      return ResourceExhaustedError("the conversation holds " + std::to_string(prompt_len) +
                                    " tokens, which fills the context of " +
                                    std::to_string(context) +
                                    ": /reset starts over, or restart with a larger -c");
    }
    GenerateRequest request;
    request.prompt = std::move(ids);
    request.sampling = sampler_;
    request.sampling.max_new_tokens = max_tokens_ > 0
                                          ? std::min<int64_t>(max_tokens_, context - prompt_len)
                                          : context - prompt_len;
    request.sampling.stop_tokens = eos;
    TextStreamer streamer(tokenizer);
    std::string answer;
    Status stream_status;
    Result<Generation> generation = engine.Generate(request, [&](const TokenEvent& e) {
      if (std::find(eos.begin(), eos.end(), e.token) != eos.end()) return true;
      Result<std::string> piece = streamer.Append(e.token);
      if (!piece.ok()) {
        stream_status = piece.status();
        return false;
      }
      answer += *piece;
      std::fputs(piece->c_str(), stdout);
      std::fflush(stdout);
      return true;
    });
    const std::string rest = streamer.Finish();
    answer += rest;
    std::fputs((rest + "\n").c_str(), stdout);
    std::fflush(stdout);
    SY_RETURN_IF_ERROR(generation.status());
    SY_RETURN_IF_ERROR(stream_status);
    return answer;
  }

  InferenceOptions options_;
  InferenceFlags flags_;
  std::string system_;
  int max_tokens_ = 0;  // 0: until the end of sequence or the context is full
  int ctx_size_ = 0;
  SamplerOptions sampler_ = GreedySampling();
};

}  // namespace

SY_REGISTER_COMMAND("chat", "Chat with a model through its chat template (interactive)",
                    ChatCommand);

}  // namespace sy::launcher
