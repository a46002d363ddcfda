// StopStrings (inference/stop_strings.h): the streamed answer equals the answer computed on the
// whole text so far after each piece (generation stops at the first piece after which some stop
// string occurs; the answer is the text before the earliest occurrence then), however the text is
// cut into pieces; and nothing that turns out to be part of a stop string is released.
#include "inference/stop_strings.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace sy {
namespace {

// The oracle: after each piece, search the whole text so far.
std::string WholeText(const std::vector<std::string>& pieces, const std::vector<std::string>& stops,
                      bool* stopped) {
  std::string text;
  for (const std::string& p : pieces) {
    text += p;
    size_t match = std::string::npos;
    for (const std::string& s : stops) {
      if (!s.empty()) match = std::min(match, text.find(s));
    }
    if (match != std::string::npos) {
      *stopped = true;
      return text.substr(0, match);
    }
  }
  *stopped = false;
  return text;
}

std::string Streamed(const std::vector<std::string>& pieces, const std::vector<std::string>& stops,
                     bool* stopped) {
  StopStrings matcher(stops);
  std::string out;
  for (const std::string& p : pieces) {
    out += matcher.Append(p);
    if (matcher.stopped()) break;
  }
  *stopped = matcher.stopped();
  if (!matcher.stopped()) out += matcher.Finish();
  return out;
}

TEST(StopStringsTest, HandPickedCases) {
  bool stopped = false;
  EXPECT_EQ(Streamed({"Hello", " wor", "ld\n", "\nUser: hi"}, {"\n\n"}, &stopped), "Hello world");
  EXPECT_TRUE(stopped);
  // A stop string split over three pieces.
  EXPECT_EQ(Streamed({"a U", "se", "r: b"}, {"User:"}, &stopped), "a ");
  EXPECT_TRUE(stopped);
  // A near miss is released once it cannot match any more.
  EXPECT_EQ(Streamed({"a Use", "d it"}, {"User:"}, &stopped), "a Used it");
  EXPECT_FALSE(stopped);
  // The earliest match wins, whichever stop string it is.
  EXPECT_EQ(Streamed({"xxBByyAA"}, {"AA", "BB"}, &stopped), "xx");
  // No stop strings, or only empty ones: everything passes.
  EXPECT_EQ(Streamed({"ab", "cd"}, {}, &stopped), "abcd");
  EXPECT_EQ(Streamed({"ab", "cd"}, {""}, &stopped), "abcd");
  EXPECT_FALSE(stopped);
}

TEST(StopStringsTest, HoldsBackOnlyWhatMayBeginAStop) {
  StopStrings m({"<|end|>"});
  EXPECT_EQ(m.Append("abc<|e"), "abc");
  EXPECT_EQ(m.Append("x"), "<|ex");
  EXPECT_EQ(m.Append("<"), "");
  EXPECT_EQ(m.Append("|end|>tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Append("more"), "");
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopStringsTest, RandomPiecesMatchTheWholeTextSoFar) {
  std::mt19937 rng(7);
  const std::string alphabet = "ab\n:";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    std::vector<std::string> stops;
    const int n = static_cast<int>(rng() % 3);
    for (int s = 0; s < n; ++s) {
      std::string stop;
      const int slen = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < slen; ++i) stop += alphabet[rng() % alphabet.size()];
      stops.push_back(stop);
    }
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t take = std::min<size_t>(text.size() - at, rng() % 5);
      pieces.push_back(text.substr(at, take));
      at += take;
    }
    bool want_stop = false, got_stop = false;
    const std::string want = WholeText(pieces, stops, &want_stop);
    ASSERT_EQ(Streamed(pieces, stops, &got_stop), want) << "text '" << text << "'";
    ASSERT_EQ(got_stop, want_stop) << "text '" << text << "'";
  }
}

}  // namespace
}  // namespace sy
