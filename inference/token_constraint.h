// Constrained decoding: the tokens a request may draw next are those whose bytes a grammar
// (inference/json_grammar.h) admits, so that the answer is, say, a JSON object or a value of a
// JSON Schema by construction, not by retrying. The engine masks the logits (every other token
// to -infinity) before it samples, then advances the grammar past the drawn token
// (GenerateEngine::Draw).
//
// ConstraintVocabulary: the bytes of every token of a tokenizer, sorted so that tokens sharing a
// prefix sit together; a mask walks them in order and matches each shared prefix once, skipping
// every token under a prefix the grammar refused. Built once per model (a few hundred ms for a
// 150k vocabulary). Only ordinary and byte tokens take part: special, control and unused tokens
// are never drawn under a constraint, except the end tokens, which are allowed exactly when the
// grammar can end (and are the only choice once it must).
//
// Ownership: a GrammarConstraint shares the grammar and the vocabulary (immutable). Thread-safety:
// ConstraintVocabulary is immutable (share it across threads); a GrammarConstraint belongs to one
// request, used on the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "inference/json_grammar.h"
#include "inference/tokenizer.h"
#include "runtime/core/mutex.h"
#include "runtime/core/status.h"

namespace sy {

class ConstraintVocabulary {
 public:
  // The bytes of each id below `vocab_size` (the model's; ids past the tokenizer's have none).
  static Result<std::shared_ptr<const ConstraintVocabulary>> Build(const Tokenizer& tokenizer,
                                                                   int64_t vocab_size);

  struct Entry {
    std::string bytes;
    int32_t id = 0;
    uint32_t shared = 0;  // bytes in common with the previous entry
  };
  const std::vector<Entry>& entries() const { return entries_; }  // sorted by bytes
  int64_t vocab_size() const { return vocab_size_; }
  // The bytes of `id`; null for a token that takes no part.
  const std::string* bytes(int32_t id) const;

 private:
  std::vector<Entry> entries_;
  std::vector<int32_t> entry_of_id_;  // -1: no entry
  int64_t vocab_size_ = 0;
};

// The vocabulary of one tokenizer, built at its first use (a server's first response_format, the
// Python API's) and shared after. Thread-safe.
class ConstraintVocabularyCache {
 public:
  Result<std::shared_ptr<const ConstraintVocabulary>> Get(const Tokenizer& tokenizer,
                                                          int64_t vocab_size) SY_EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::shared_ptr<const ConstraintVocabulary> vocabulary_ SY_GUARDED_BY(mu_);
};

class GrammarConstraint {
 public:
  // `end_tokens`: the tokens that end the answer (the model's end of sequence); at least one.
  // `max_states`: the states the cache keeps (below), at least 2.
  GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                    std::shared_ptr<const ConstraintVocabulary> vocabulary,
                    std::vector<int32_t> end_tokens, size_t max_states = 4096);

  // Sets the logit of every token that may not come next to -infinity. `logits` has the
  // vocabulary's size.
  void Mask(std::span<float> logits);
  // Moves past `token` (drawn from a masked row).
  void Accept(int32_t token);
  // The answer so far is a whole value.
  bool complete() const { return states_[static_cast<size_t>(current_)].matcher.can_end(); }
  // How many times the state cache has started over (below).
  int64_t cache_restarts() const { return cache_restarts_; }

 private:
  // The grammar states met so far, each with its transitions once taken (kUnknown until then,
  // kRefused for a byte it does not admit): inside a string every ordinary byte leads back to the
  // same state, so a mask walks most of the vocabulary by table lookups. At most max_states_ are
  // kept (1 KiB of table each); past that the cache starts over from the states in use.
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kRefused = -1;
  struct State {
    GrammarMatcher matcher;
    std::vector<int32_t> next;  // [256]
  };
  int32_t Intern(GrammarMatcher matcher);
  int32_t Step(int32_t state, uint8_t byte);
  // Keeps only the states in `live` (renumbered in place) and current_.
  void Compact(std::vector<int32_t>* live);

  std::shared_ptr<const ConstraintVocabulary> vocabulary_;
  std::vector<int32_t> end_tokens_;
  size_t max_states_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> ids_;  // GrammarMatcher::Key -> index in states_
  int32_t current_ = 0;                           // the state of the answer so far
  int64_t cache_restarts_ = 0;
  std::vector<int32_t> prefix_states_;  // Mask's scratch: the state after each prefix
  std::vector<uint8_t> allowed_;        // Mask's scratch, per id
};

}  // namespace sy
