// Sampler: picks the next token from a row of logits; StopCondition: decides when a sequence ends.
//
// Sampling follows Hugging Face's logits processors and warpers, applied in HF's order:
//   0. penalties, on the raw logits, when asked for (greedy decoding included):
//      - repetition_penalty (RepetitionPenaltyLogitsProcessor): each distinct token of the prompt
//        (StartSequence) and of the answer so far has its logit divided by it when positive,
//        multiplied by it when negative;
//      - presence_penalty and frequency_penalty (OpenAI's definition, as vLLM applies it): each
//        token of the answer so far has its logit lowered by frequency_penalty x its count and by
//        presence_penalty once;
//      - logit_bias (OpenAI's): a fixed amount added to the listed tokens' logits.
//   1. temperature: logits / temperature (TemperatureLogitsWarper). 1 leaves them as they are;
//      0 means greedy decoding: the argmax, lowest token id on ties, and no random draw.
//   2. top-k: keep the k most likely tokens (TopKLogitsWarper). One difference: HF keeps every
//      token tied with the k-th; here exactly k are kept, lower token ids first among ties.
//   3. top-p (nucleus): keep the smallest set of most likely tokens whose probability, after
//      steps 1-2, reaches top_p; always at least one token (TopPLogitsWarper).
//   4. min-p: drop the tokens whose probability, after steps 1-3, is below min_p times the most
//      likely one's (MinPLogitsWarper).
//   5. draw one token from the softmax of what is left.
// Probabilities are computed in double. NaN logits are treated as -inf (never drawn); a row with
// no finite-or-+inf logit is a broken invariant (SY_CHECK). +inf logits share all the mass.
//
// Randomness: each sequence (batch row) has its own std::mt19937_64, so rows are independent and
// a row's tokens do not depend on how other rows are sampled. Sequence i starts from seed
// options.seed + i; Reseed(i, s) restarts it from s, so a request with seed s draws the same
// tokens in any batch slot. Uniform draws take the top 53 bits of one 64-bit output, so results are
// the same on every platform and standard library.
//
// Ownership: the Sampler owns its generators and a scratch buffer; logits are borrowed for the
// call. Thread-safety: not thread-safe (the scratch buffer is shared by all sequences); use one
// Sampler per thread.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/core/status.h"

namespace sy {

struct SamplerOptions {
  // Divides the logits before the softmax; finite and >= 0. 0 means greedy. Default: 1.0 (no
  // change).
  float temperature = 1.0f;
  // Keep only the k most likely tokens; >= 0, 0 disables. Default: 0 (tokens).
  int32_t top_k = 0;
  // Nucleus mass to keep, in (0, 1]; 1 disables. Default: 1.0 (probability).
  float top_p = 1.0f;
  // Relative probability floor, in [0, 1]; 0 disables. Default: 0.
  float min_p = 0.0f;
  // Logit divisor of the tokens already seen (prompt and answer), > 0 and finite; 1 disables.
  // Default: 1.
  float repetition_penalty = 1.0f;
  // Logit subtracted once from each token the answer holds, in [-2, 2]; 0 disables. Default: 0.
  float presence_penalty = 0.0f;
  // Logit subtracted per occurrence of a token in the answer, in [-2, 2]; 0 disables. Default: 0.
  float frequency_penalty = 0.0f;
  // (token id >= 0, bias in [-100, 100]) added to those tokens' logits. Default: none.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Seed of the per-sequence generators (sequence i uses seed + i). Default: 0.
  uint64_t seed = 0;
  // StopCondition: generation ends after this many new tokens, >= 1. Default: 256 (tokens).
  int64_t max_new_tokens = 256;
  // StopCondition: generating any of these token ids (>= 0) ends the sequence; the stop token
  // counts as generated. Default: none.
  std::vector<int32_t> stop_tokens;
};

// OK, or InvalidArgument naming the first bad field, its value and the accepted range.
Status ValidateSamplerOptions(const SamplerOptions& options);

// The index of the largest logit, the lowest index among ties; NaN is never chosen unless every
// logit is NaN (then 0). `logits` must not be empty (checked).
int32_t GreedyArgmax(std::span<const float> logits);

class Sampler {
 public:
  // InvalidArgument for bad options or num_sequences < 1.
  static Result<Sampler> Create(const SamplerOptions& options, int num_sequences);

  // Samples the next token of `sequence` (in [0, num_sequences), checked) from one row of logits.
  int32_t Sample(int sequence, std::span<const float> logits);

  // Samples every row of a row-major [tokens.size(), vocab] block: row r for sequence r.
  void SampleBatch(std::span<const float> logits, int64_t vocab, std::span<int32_t> tokens);

  // Restarts the generator of `sequence` from `seed` (a new request taking over the slot).
  void Reseed(int sequence, uint64_t seed);
  // A new answer on `sequence`: forgets the tokens it drew, and notes `prompt` for the repetition
  // penalty. (Every token Sample draws joins the answer's history.)
  void StartSequence(int sequence, std::span<const int32_t> prompt);

  int num_sequences() const { return static_cast<int>(generators_.size()); }
  const SamplerOptions& options() const { return options_; }

 private:
  struct Candidate {
    float logit;
    int32_t token;
  };

  Sampler(const SamplerOptions& options, int num_sequences);

  // What the penalties look at, per sequence: the answer's token counts, the prompt's tokens.
  struct History {
    std::unordered_map<int32_t, int32_t> answer;
    std::vector<int32_t> prompt;  // sorted, unique
  };
  bool penalized() const {
    return options_.repetition_penalty != 1.0f || options_.presence_penalty != 0.0f ||
           options_.frequency_penalty != 0.0f || !options_.logit_bias.empty();
  }
  // The row with the penalties applied, in penalized_.
  std::span<const float> Penalize(int sequence, std::span<const float> logits);
  // Steps 1-5 on a row (penalized or not).
  int32_t Draw(int sequence, std::span<const float> logits);

  SamplerOptions options_;
  std::vector<std::mt19937_64> generators_;  // one per sequence
  std::vector<History> histories_;           // one per sequence
  std::vector<float> penalized_;             // scratch
  std::vector<Candidate> candidates_;        // scratch, reused across calls
  std::vector<double> weights_;              // scratch, reused across calls
};

enum class StopReason : uint8_t {
  kNone,       // keep generating
  kStopToken,  // the token just generated is a stop token
  kMaxTokens,  // max_new_tokens have been generated
};

// Counts one sequence's generated tokens and says when it must stop. A value type; not
// thread-safe.
class StopCondition {
 public:
  // From options.stop_tokens and options.max_new_tokens; InvalidArgument when those are bad.
  static Result<StopCondition> Create(const SamplerOptions& options);

  // Records one generated token. Returns why generation ends with it, or kNone. A stop token wins
  // over the length limit when both apply. Calling it again after a stop is a broken invariant.
  StopReason Append(int32_t token);

  int64_t generated() const { return generated_; }
  StopReason reason() const { return reason_; }
  bool stopped() const { return reason_ != StopReason::kNone; }
  // Starts counting a new sequence with the same limits.
  void Reset();

 private:
  StopCondition(std::vector<int32_t> stop_tokens, int64_t max_new_tokens);

  std::vector<int32_t> stop_tokens_;  // sorted, unique
  int64_t max_new_tokens_;
  int64_t generated_ = 0;
  StopReason reason_ = StopReason::kNone;
};

}  // namespace sy
