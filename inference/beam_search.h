// BeamSearch: the `width` most likely continuations of a prompt under a MoeModel, over a
// KvCacheDecoder of `width` sequences.
//
// Score of a hypothesis = sum of the natural-log softmax probabilities of its generated tokens
// (no length penalty). Each step extends every live beam by every token, keeps the `width` best
// candidates, and retires a candidate that ends in a stop token as finished (it is no longer
// extended). It runs max_new_tokens steps or until no beam is live, and returns the best `width`
// of the finished and live hypotheses, best first. With width >= vocab^(max_new_tokens - 1) this
// is the exact top-`width` search (what tests/inference/beam_search_test.cc checks against brute
// force); width 1 is greedy decoding.
//
// KV cache: the prompt is prefilled once into the decoder's shared prefix, which every beam reads
// by reference (KvCacheDecoder::CreateWithSharedPrefix, Note [shared prefix]); each beam's slot
// holds only its generated tokens. At each step a beam whose parent has only it as a child keeps
// its slot in place, and each further child of a parent gets a copy of the parent's generated
// tokens' cache (KvCacheDecoder::CopySequence) in a slot that no survivor needs (copies never
// overwrite a parent that is still read).
//
// Experts: through `provider` (inference/expert_provider.h; installed on the model when it is not
// yet), or the model's own when null.
//
// Ownership: borrows the model and the provider; returns values. Thread-safety: drives the
// backend's compute stream; one call at a time per model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "inference/expert_provider.h"
#include "runtime/core/status.h"
#include "runtime/model/moe_model.h"

namespace sy {

struct BeamSearchOptions {
  int width = 4;                     // Default: 4 beams. >= 1
  int max_new_tokens = 16;           // Default: 16 tokens at most per hypothesis. >= 1
  std::vector<int32_t> stop_tokens;  // Default: none. A hypothesis ending in one is finished
};

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // generated tokens (the stop token included when finished)
  double log_prob = 0.0;        // sum of the tokens' log-probabilities
  bool finished = false;        // ended in a stop token
};

// InvalidArgument for an empty prompt, width < 1 or max_new_tokens < 1, or an id out of range.
Result<std::vector<BeamHypothesis>> BeamSearch(MoeModel& model, std::span<const int32_t> prompt,
                                               const BeamSearchOptions& options,
                                               ExpertProvider* provider = nullptr);

// log softmax of `logits`, in double.
std::vector<double> LogSoftmax(std::span<const float> logits);

}  // namespace sy
