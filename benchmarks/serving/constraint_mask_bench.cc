// The token mask of constrained decoding (inference/token_constraint.h) on a 152k-token
// vocabulary (Qwen's size; random ASCII pieces, half with a leading space, and the 256 bytes), at
// three places of a JSON object: before it (only "{" passes), inside a string (almost every token
// passes: the walk's worst case) and inside a number. A: GrammarConstraint::Mask (the sorted walk
// with cached grammar states); B: every token matched on its own from a copy of the matcher (what
// a mask costs without the walk and the cache). A and B alternate, 7 rounds per place; the medians
// and their ratio B / A are printed.
//
//   build/benchmarks/serving/constraint_mask_bench
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "inference/token_constraint.h"
#include "tests/inference/list_tokenizer.h"

namespace sy {
namespace {

struct Setup {
  std::unique_ptr<ListTokenizer> tokenizer;
  std::shared_ptr<const ConstraintVocabulary> vocabulary;
  std::shared_ptr<const Grammar> grammar;
  int32_t end = 0;
};

const Setup& TheSetup() {
  static const Setup setup = [] {
    Setup s;
    std::mt19937 rng(1);
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    while (tokens.size() < 151935) {
      std::string t = rng() % 2 ? " " : "";
      const int len = 2 + static_cast<int>(rng() % 7);
      for (int k = 0; k < len; ++k) t += static_cast<char>('a' + rng() % 26);
      tokens.push_back(t);
    }
    s.end = static_cast<int32_t>(tokens.size());
    tokens.push_back("<|im_end|>");
    s.tokenizer = std::make_unique<ListTokenizer>(std::move(tokens));
    s.vocabulary = ConstraintVocabulary::Build(*s.tokenizer, s.tokenizer->vocab_size()).value();
    s.grammar = std::make_shared<const Grammar>(Grammar::AnyJsonObject());
    return s;
  }();
  return setup;
}

double Seconds(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A: the constraint's mask at `place` (its state cache warm, as it is after the first token).
double MaskWalk(const Setup& s, const std::string& place, std::vector<float>& logits,
                int64_t* allowed) {
  GrammarConstraint constraint(s.grammar, s.vocabulary, {s.end});
  for (char c : place) constraint.Accept(static_cast<uint8_t>(c));  // byte tokens: id = byte
  std::fill(logits.begin(), logits.end(), 0.0f);
  constraint.Mask(logits);  // warms the cache
  std::fill(logits.begin(), logits.end(), 0.0f);
  const auto start = std::chrono::steady_clock::now();
  constraint.Mask(logits);
  const double seconds = Seconds(start);
  *allowed = std::count_if(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); });
  return seconds;
}

// B: every token matched on its own from a copy of the matcher.
double MaskEachToken(const Setup& s, const std::string& place, std::vector<float>& logits,
                     int64_t* allowed) {
  GrammarMatcher matcher(s.grammar);
  matcher.AdvanceAll(place);
  const auto& tokens = s.tokenizer->tokens();
  const auto start = std::chrono::steady_clock::now();
  *allowed = 0;
  for (size_t id = 0; id < tokens.size(); ++id) {
    GrammarMatcher copy = matcher;
    const bool ok =
        static_cast<int32_t>(id) == s.end ? matcher.can_end() : copy.AdvanceAll(tokens[id]);
    logits[id] = ok ? 0.0f : -INFINITY;
    *allowed += ok ? 1 : 0;
  }
  return Seconds(start);
}

}  // namespace
}  // namespace sy

int main() {
  using namespace sy;
  const Setup& s = TheSetup();
  std::vector<float> logits(static_cast<size_t>(s.tokenizer->vocab_size()));
  std::printf("vocabulary %lld tokens; medians of 7 alternating rounds\n",
              static_cast<long long>(s.tokenizer->vocab_size()));
  std::printf("%-28s %12s %16s %8s %10s\n", "after", "walk (ms)", "each token (ms)", "ratio",
              "allowed");
  for (const char* place : {"", "{\"key\": \"some text", "{\"key\": 12"}) {
    std::vector<double> a, b;
    int64_t allowed_a = 0, allowed_b = 0;
    for (int round = 0; round < 7; ++round) {
      a.push_back(MaskWalk(s, place, logits, &allowed_a));
      b.push_back(MaskEachToken(s, place, logits, &allowed_b));
    }
    if (allowed_a != allowed_b) {
      std::printf("MISMATCH after '%s': %lld vs %lld tokens allowed\n", place,
                  static_cast<long long>(allowed_a), static_cast<long long>(allowed_b));
      return 1;
    }
    std::printf("%-28s %12.2f %16.1f %7.0fx %10lld\n", ("'" + std::string(place) + "'").c_str(),
                Median(a) * 1e3, Median(b) * 1e3, Median(b) / Median(a),
                static_cast<long long>(allowed_a));
  }
  return 0;
}
