#include "inference/beam_search.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "inference/kv_cache_decoder.h"

namespace sy {
namespace {

struct Beam {
  BeamHypothesis hyp;
  int slot = 0;                   // decoder sequence holding its cache
  std::vector<double> log_probs;  // of its next token
};

struct Candidate {
  double score;
  int beam;
  int32_t token;
};

}  // namespace

std::vector<double> LogSoftmax(std::span<const float> logits) {
  double max = -INFINITY;
  for (const float v : logits) max = std::max(max, static_cast<double>(v));
  double sum = 0.0;
  for (const float v : logits) sum += std::exp(static_cast<double>(v) - max);
  const double log_z = max + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_z;
  return out;
}

Result<std::vector<BeamHypothesis>> BeamSearch(MoeModel& model, std::span<const int32_t> prompt,
                                               const BeamSearchOptions& options,
                                               ExpertProvider* provider) {
  if (prompt.empty()) return InvalidArgumentError("beam search: the prompt is empty");
  if (options.width < 1 || options.max_new_tokens < 1) {
    return InvalidArgumentError("beam search: width (" + std::to_string(options.width) +
                                ") and max_new_tokens (" + std::to_string(options.max_new_tokens) +
                                ") must be >= 1");
  }
  const int width = options.width;
  const int64_t vocab = model.config().vocab_size;
  SY_ASSIGN_OR_RETURN(auto decoder, KvCacheDecoder::CreateWithSharedPrefix(
                                        model, static_cast<int64_t>(prompt.size()),
                                        options.max_new_tokens, width, provider));
  SY_ASSIGN_OR_RETURN(std::vector<float> logits, decoder->PrefillShared(prompt));
  Beam first;
  first.log_probs = LogSoftmax(std::span<const float>(logits).subspan(
      (prompt.size() - 1) * static_cast<size_t>(vocab), static_cast<size_t>(vocab)));
  std::vector<Beam> live;
  live.push_back(std::move(first));
  std::vector<BeamHypothesis> finished;
  auto is_stop = [&](int32_t t) {
    return std::find(options.stop_tokens.begin(), options.stop_tokens.end(), t) !=
           options.stop_tokens.end();
  };

  for (int step = 0; step < options.max_new_tokens && !live.empty(); ++step) {
    std::vector<Candidate> cands;
    cands.reserve(live.size() * static_cast<size_t>(vocab));
    for (size_t b = 0; b < live.size(); ++b) {
      for (int64_t t = 0; t < vocab; ++t) {
        cands.push_back({live[b].hyp.log_prob + live[b].log_probs[static_cast<size_t>(t)],
                         static_cast<int>(b), static_cast<int32_t>(t)});
      }
    }
    const size_t keep = std::min(cands.size(), static_cast<size_t>(width));
    // Best first; ties by (beam, token) so the result does not depend on the sort.
    auto better = [](const Candidate& x, const Candidate& y) {
      if (x.score != y.score) return x.score > y.score;
      if (x.beam != y.beam) return x.beam < y.beam;
      return x.token < y.token;
    };
    std::partial_sort(cands.begin(), cands.begin() + static_cast<std::ptrdiff_t>(keep), cands.end(),
                      better);
    cands.resize(keep);

    std::vector<Candidate> continuing;
    for (const Candidate& c : cands) {
      BeamHypothesis h = live[static_cast<size_t>(c.beam)].hyp;
      h.tokens.push_back(c.token);
      h.log_prob = c.score;
      if (is_stop(c.token)) {
        h.finished = true;
        finished.push_back(std::move(h));
      } else if (step + 1 == options.max_new_tokens) {
        finished.push_back(std::move(h));  // out of tokens: kept, not finished
      } else {
        continuing.push_back(c);
      }
    }
    if (continuing.empty()) break;

    // Slots: a parent's first child keeps the parent's slot; other children take slots that no
    // continuing beam's parent holds, so no copy overwrites a cache still to be read.
    std::vector<bool> parent_slot(static_cast<size_t>(width), false);
    for (const Candidate& c : continuing)
      parent_slot[static_cast<size_t>(live[static_cast<size_t>(c.beam)].slot)] = true;
    std::vector<int> free_slots;
    for (int s = 0; s < width; ++s) {
      if (!parent_slot[static_cast<size_t>(s)]) free_slots.push_back(s);
    }
    std::vector<bool> slot_taken(static_cast<size_t>(width), false);
    std::vector<Beam> next;
    std::vector<int32_t> step_tokens(static_cast<size_t>(width), 0);  // idle slots decode id 0
    for (const Candidate& c : continuing) {
      const Beam& parent = live[static_cast<size_t>(c.beam)];
      Beam child;
      child.hyp = parent.hyp;
      child.hyp.tokens.push_back(c.token);
      child.hyp.log_prob = c.score;
      if (!slot_taken[static_cast<size_t>(parent.slot)]) {
        child.slot = parent.slot;
      } else {
        SY_CHECK(!free_slots.empty()) << "beam search: no free cache slot";
        child.slot = free_slots.back();
        free_slots.pop_back();
        decoder->CopySequence(child.slot, parent.slot);
      }
      slot_taken[static_cast<size_t>(child.slot)] = true;
      step_tokens[static_cast<size_t>(child.slot)] = c.token;
      next.push_back(std::move(child));
    }
    // Idle slots decode a dummy token; at most max_new_tokens - 1 decodes keep every slot's own
    // tokens within the cache's max_new_tokens.
    SY_ASSIGN_OR_RETURN(std::vector<float> step_logits, decoder->Decode(step_tokens));
    for (Beam& b : next) {
      b.log_probs =
          LogSoftmax(std::span<const float>(step_logits)
                         .subspan(static_cast<size_t>(b.slot) * static_cast<size_t>(vocab),
                                  static_cast<size_t>(vocab)));
    }
    live = std::move(next);
  }
  std::stable_sort(
      finished.begin(), finished.end(),
      [](const BeamHypothesis& x, const BeamHypothesis& y) { return x.log_prob > y.log_prob; });
  if (finished.size() > static_cast<size_t>(width)) finished.resize(static_cast<size_t>(width));
  return finished;
}

}  // namespace sy
