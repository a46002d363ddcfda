// AnswerStream: one request's answer, as a server (launcher/serving/) or the Python API (python/)
// hands it out while it is produced. It reads the request's RequestHandle
// (inference/engine_thread.h), turns the tokens into text (the tokenizer's TextStreamer, which
// holds back an incomplete UTF-8 character), cuts the text at the first stop string
// (inference/stop_strings.h) and then cancels the request, and says how the answer finished in the
// OpenAI API's words: "stop" (a stop token or a stop string), "length" (max_tokens), or "abort"
// (cancelled: the client left or the server is stopping).
//
// A stop token (the model's end of sequence, or a stop_token_ids entry) ends the answer: it is in
// the ids (as `switchyard generate` prints it) but not in the text. Without a tokenizer there is
// no text, only ids.
//
// Ownership: shares the handle with the engine thread; borrows the tokenizer (it outlives the
// stream). Thread-safety: one thread at a time; Cancel and SetNotify from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inference/engine_thread.h"
#include "inference/stop_strings.h"
#include "inference/tokenizer.h"
#include "runtime/core/status.h"

namespace sy {

// What the answer gained since the previous AnswerStream::Next.
struct AnswerPiece {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;  // parallel to token_ids when the request asked for them
  bool finished = false;
  std::string finish_reason;  // when finished: stop, length or abort
  Status status;              // when finished: not OK when the engine failed the request
};

class AnswerStream {
 public:
  // `stop_token_ids`: the tokens that end the answer (they are not shown as text).
  AnswerStream(std::shared_ptr<RequestHandle> handle, const Tokenizer* tokenizer,
               std::vector<std::string> stop_strings, std::vector<int32_t> stop_token_ids);

  // Waits up to `timeout` for the answer to grow or end; returns what is new (maybe nothing).
  AnswerPiece Next(std::chrono::milliseconds timeout);
  // Ends the request (the client left); Next then finishes with "abort".
  void Cancel() { handle_->Cancel(); }
  // `notify` runs on the engine thread whenever the answer grows or ends
  // (RequestHandle::SetNotify): for a reader that does not wait in Next.
  void SetNotify(std::function<void()> notify) { handle_->SetNotify(std::move(notify)); }

  int64_t completion_tokens() const { return completion_tokens_; }
  double ttft_seconds() const { return ttft_seconds_; }

 private:
  std::shared_ptr<RequestHandle> handle_;
  std::optional<TextStreamer> streamer_;
  StopStrings stops_;
  std::vector<int32_t> stop_token_ids_;
  bool stopped_by_string_ = false;
  bool done_ = false;
  int64_t completion_tokens_ = 0;
  double ttft_seconds_ = 0.0;
};

}  // namespace sy
