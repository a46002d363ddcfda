// StopStrings: ends a stream of text at the first of a set of stop strings, as the OpenAI API's
// `stop` does: the answer is the text before the match; the stop string and whatever follows it
// are not part of it. As in other servers, the stream stops at the first piece after which some
// stop string occurs in the text so far, and is cut at the earliest occurrence then (a longer
// stop string that could have matched earlier had the text gone on does not count). The text
// arrives in pieces (a token's worth at a time, inference/ tokenizer.h's TextStreamer), so a stop
// string may span pieces: Append holds back the end of the text that could still be the beginning
// of a stop string, and releases it once it cannot.
//
//   StopStrings stops({"\n\n", "User:"});
//   for each token: out += stops.Append(piece); if (stops.stopped()) cancel the request;
//   at the end, when not stopped: out += stops.Finish();
//
// What Append returns is always a prefix of the whole text, so valid UTF-8 in gives valid UTF-8
// out (a stop string starts at a character boundary, and so does whatever is held back).
//
// Ownership: a value. Thread-safety: not thread-safe; one per stream.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sy {

class StopStrings {
 public:
  // Empty strings in `stops` are ignored; no stop strings: Append passes everything through.
  explicit StopStrings(std::vector<std::string> stops);

  // Appends `piece` and returns the text that is now certain to be part of the answer. Once a
  // stop string has matched, stopped() is true and Append returns "" from then on.
  std::string Append(std::string_view piece);
  bool stopped() const { return stopped_; }
  // The text still held back, at the end of a stream that did not stop ("" after a stop).
  std::string Finish();

 private:
  std::vector<std::string> stops_;
  std::string held_;  // the end of the text that may begin a stop string
  bool stopped_ = false;
};

}  // namespace sy
