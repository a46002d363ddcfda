// Perplexity, and a model's agreement with a reference model, over a token stream: what
// llama.cpp's perplexity tool reports (with --kl-divergence), so a quantized or lower-precision
// model can be judged against its full-precision source.
//
// The stream is cut into chunks of `context` tokens. Each chunk is one prompt (no state carries
// over between chunks); position j of a chunk predicts token j + 1, and positions from context/2
// on are scored, the first half serving as context only (llama.cpp's convention, so figures
// compare). Per scored position:
//   - the negative log-likelihood of the next token under the model (perplexity = exp(mean));
//   - with a reference: KL(reference || model) over the whole vocabulary, whether both argmaxes
//     agree (top-1 agreement), and the reference's own NLL.
// Log-softmax is taken in double precision.
//
// Ownership: borrows the engines for the call. Thread-safety: one thread (the engines' own).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "inference/generate_engine.h"
#include "runtime/core/status.h"

namespace sy {

struct QualityOptions {
  int64_t context = 128;   // tokens per chunk, >= 2. Default: 128
  int64_t max_chunks = 0;  // score at most this many chunks; 0: every whole chunk. Default: 0
};

struct QualityReport {
  int64_t chunks = 0;
  int64_t scored = 0;  // positions scored
  double nll_sum = 0;  // sum of -log p(next token)
  bool has_reference = false;
  double reference_nll_sum = 0;
  double kl_sum = 0;       // sum of KL(reference || model), in nats
  double kl_max = 0;       // the largest KL of one position
  int64_t top1_agree = 0;  // positions where both models' most likely token is the same

  double perplexity() const;
  double reference_perplexity() const;
  double mean_kl() const;
  double top1_agreement() const;  // a fraction in [0, 1]
};

// Scores one chunk's logits (f32 [chunk.size(), vocab], row j predicting chunk[j + 1]) from
// position `first` on into *report; `reference_logits`, when not empty, has the same shape.
void ScoreChunk(std::span<const float> logits, std::span<const float> reference_logits,
                int64_t vocab, std::span<const int32_t> chunk, int64_t first,
                QualityReport* report);

// Runs every chunk of `tokens` through `model` (and `reference`, when not null) and scores it.
// InvalidArgument when `tokens` holds less than one chunk, the context is below 2 or above either
// engine's max_context, or the two models' vocabularies differ; the engines' errors otherwise.
// `progress(done, total)` runs after each chunk.
Result<QualityReport> MeasureQuality(GenerateEngine& model, GenerateEngine* reference,
                                     std::span<const int32_t> tokens, const QualityOptions& options,
                                     const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sy
