#include "inference/answer_stream.h"

#include <algorithm>
#include <utility>

namespace sy {

AnswerStream::AnswerStream(std::shared_ptr<RequestHandle> handle, const Tokenizer* tokenizer,
                           std::vector<std::string> stop_strings,
                           std::vector<int32_t> stop_token_ids)
    : handle_(std::move(handle)),
      stops_(std::move(stop_strings)),
      stop_token_ids_(std::move(stop_token_ids)) {
  if (tokenizer != nullptr) streamer_.emplace(*tokenizer);
}

AnswerPiece AnswerStream::Next(std::chrono::milliseconds timeout) {
  AnswerPiece piece;
  if (done_) {
    piece.finished = true;
    piece.finish_reason = "abort";
    return piece;
  }
  RequestUpdate update = handle_->Next(timeout);
  for (size_t i = 0; i < update.tokens.size(); ++i) {
    const int32_t token = update.tokens[i];
    if (stopped_by_string_) break;  // tokens drawn before the cancel reached the engine
    ++completion_tokens_;
    piece.token_ids.push_back(token);
    if (i < update.logprobs.size()) piece.logprobs.push_back(std::move(update.logprobs[i]));
    const bool stop_token =
        std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end();
    if (!streamer_ || stop_token) continue;
    Result<std::string> text = streamer_->Append(token);
    if (!text.ok()) {
      // An id the tokenizer cannot decode: the answer ends here with the error.
      handle_->Cancel();
      done_ = true;
      piece.finished = true;
      piece.finish_reason = "abort";
      piece.status = text.status();
      return piece;
    }
    piece.text += stops_.Append(*text);
    if (stops_.stopped()) {
      stopped_by_string_ = true;
      handle_->Cancel();
    }
  }
  if (!update.finished) return piece;
  done_ = true;
  ttft_seconds_ = update.ttft_seconds;
  piece.finished = true;
  piece.status = update.status;
  if (streamer_ && !stopped_by_string_) {
    piece.text += stops_.Append(streamer_->Finish());
    stopped_by_string_ = stops_.stopped();
  }
  if (!stopped_by_string_) piece.text += stops_.Finish();
  if (stopped_by_string_) {
    piece.finish_reason = "stop";
  } else {
    switch (update.finish) {
      case FinishReason::kStopToken:
        piece.finish_reason = "stop";
        break;
      case FinishReason::kMaxTokens:
      case FinishReason::kPromptOnly:
        piece.finish_reason = "length";
        break;
      case FinishReason::kCancelled:
        piece.finish_reason = "abort";
        break;
    }
  }
  return piece;
}

}  // namespace sy
