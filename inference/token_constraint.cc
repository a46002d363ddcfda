#include "inference/token_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace sy {

Result<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabulary::Build(
    const Tokenizer& tokenizer, int64_t vocab_size) {
  auto v = std::make_shared<ConstraintVocabulary>();
  v->vocab_size_ = vocab_size;
  v->entry_of_id_.assign(static_cast<size_t>(vocab_size), -1);
  // Special, control and unused tokens take no part (their text is markup, not output).
  std::vector<int32_t> types;
  if (Result<TokenizerVocabulary> vocab = tokenizer.Vocabulary(); vocab.ok()) {
    types = std::move(vocab->types);
  }
  // A token's bytes in the middle of a text: decoders drop the leading space of a text's first
  // token (SentencePiece's "▁"), so each token is decoded after an anchor token and the
  // anchor's own text taken off.
  int32_t anchor = -1;
  std::string anchor_text;
  if (Result<std::vector<int32_t>> a = tokenizer.Encode("a"); a.ok() && !a->empty()) {
    anchor = a->back();
    const int32_t one[1] = {anchor};
    Result<std::string> text = tokenizer.Decode(one);
    if (text.ok()) {
      anchor_text = std::move(text).value();
    } else {
      anchor = -1;
    }
  }
  const int64_t n = std::min(vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < n; ++id) {
    if (static_cast<size_t>(id) < types.size() && types[static_cast<size_t>(id)] != 0 &&
        types[static_cast<size_t>(id)] != TokenizerVocabulary::kNormal &&
        types[static_cast<size_t>(id)] != TokenizerVocabulary::kByte) {
      continue;
    }
    std::string bytes;
    bool decoded = false;
    if (anchor >= 0) {
      const int32_t pair[2] = {anchor, id};
      Result<std::string> both = tokenizer.Decode(pair);
      if (both.ok() && both->compare(0, anchor_text.size(), anchor_text) == 0) {
        bytes = both->substr(anchor_text.size());
        decoded = true;
      }
    }
    if (!decoded) {
      const int32_t one[1] = {id};
      Result<std::string> alone = tokenizer.Decode(one);
      if (!alone.ok()) continue;
      bytes = std::move(alone).value();
    }
    if (bytes.empty()) continue;
    v->entries_.push_back({std::move(bytes), id, 0});
  }
  std::sort(v->entries_.begin(), v->entries_.end(),
            [](const Entry& a, const Entry& b) { return a.bytes < b.bytes; });
  for (size_t i = 0; i < v->entries_.size(); ++i) {
    Entry& e = v->entries_[i];
    v->entry_of_id_[static_cast<size_t>(e.id)] = static_cast<int32_t>(i);
    if (i == 0) continue;
    const std::string& prev = v->entries_[i - 1].bytes;
    const size_t limit = std::min(prev.size(), e.bytes.size());
    size_t k = 0;
    while (k < limit && prev[k] == e.bytes[k]) ++k;
    e.shared = static_cast<uint32_t>(k);
  }
  if (v->entries_.empty()) {
    return InvalidArgumentError("the tokenizer has no ordinary tokens to constrain output with");
  }
  return std::shared_ptr<const ConstraintVocabulary>(std::move(v));
}

Result<std::shared_ptr<const ConstraintVocabulary>> ConstraintVocabularyCache::Get(
    const Tokenizer& tokenizer, int64_t vocab_size) {
  MutexLock lock(&mu_);
  if (vocabulary_ == nullptr) {
    SY_ASSIGN_OR_RETURN(vocabulary_, ConstraintVocabulary::Build(tokenizer, vocab_size));
  }
  return vocabulary_;
}

const std::string* ConstraintVocabulary::bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return nullptr;
  const int32_t e = entry_of_id_[static_cast<size_t>(id)];
  return e < 0 ? nullptr : &entries_[static_cast<size_t>(e)].bytes;
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const ConstraintVocabulary> vocabulary,
                                     std::vector<int32_t> end_tokens, size_t max_states)
    : vocabulary_(std::move(vocabulary)),
      end_tokens_(std::move(end_tokens)),
      max_states_(std::max<size_t>(2, max_states)) {
  current_ = Intern(GrammarMatcher(std::move(grammar)));
}

int32_t GrammarConstraint::Intern(GrammarMatcher matcher) {
  std::string key = matcher.Key();
  if (auto it = ids_.find(key); it != ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(states_.size());
  states_.push_back({std::move(matcher), std::vector<int32_t>(256, kUnknown)});
  ids_.emplace(std::move(key), id);
  return id;
}

int32_t GrammarConstraint::Step(int32_t state, uint8_t byte) {
  const int32_t known = states_[static_cast<size_t>(state)].next[byte];
  if (known != kUnknown) return known;
  GrammarMatcher next = states_[static_cast<size_t>(state)].matcher;
  const int32_t id = next.Advance(byte) ? Intern(std::move(next)) : kRefused;
  states_[static_cast<size_t>(state)].next[byte] = id;  // (Intern may have moved states_)
  return id;
}

void GrammarConstraint::Compact(std::vector<int32_t>* live) {
  ++cache_restarts_;
  std::vector<State> kept;
  std::unordered_map<std::string, int32_t> ids;
  auto keep = [&](int32_t& id) {
    std::string key = states_[static_cast<size_t>(id)].matcher.Key();
    auto [it, fresh] = ids.emplace(std::move(key), static_cast<int32_t>(kept.size()));
    if (fresh) {
      kept.push_back(
          {states_[static_cast<size_t>(id)].matcher, std::vector<int32_t>(256, kUnknown)});
    }
    id = it->second;
  };
  keep(current_);
  for (int32_t& id : *live) keep(id);
  states_ = std::move(kept);
  ids_ = std::move(ids);
}

void GrammarConstraint::Mask(std::span<float> logits) {
  allowed_.assign(logits.size(), 0);
  bool any = false;
  if (!states_[static_cast<size_t>(current_)].matcher.must_end()) {
    // prefix_states_[d]: the state after the first d bytes of the entry at hand; states up to
    // `valid` hold for it. A refused prefix of `dead` bytes refuses every following entry that
    // shares it.
    prefix_states_.assign(1, current_);
    size_t valid = 0;
    uint32_t dead = std::numeric_limits<uint32_t>::max();
    for (const ConstraintVocabulary::Entry& e : vocabulary_->entries()) {
      if (e.shared >= dead) continue;
      dead = std::numeric_limits<uint32_t>::max();
      size_t depth = std::min<size_t>(e.shared, valid);
      prefix_states_.resize(depth + 1);
      bool admitted = true;
      for (; depth < e.bytes.size(); ++depth) {
        if (states_.size() >= max_states_) Compact(&prefix_states_);
        const int32_t next = Step(prefix_states_[depth], static_cast<uint8_t>(e.bytes[depth]));
        if (next == kRefused) {
          dead = static_cast<uint32_t>(depth + 1);
          valid = depth;
          admitted = false;
          break;
        }
        prefix_states_.push_back(next);
      }
      if (admitted) {
        valid = e.bytes.size();
        if (static_cast<size_t>(e.id) < allowed_.size()) {
          allowed_[static_cast<size_t>(e.id)] = 1;
          any = true;
        }
      }
    }
  }
  // The end tokens, whatever their text: when the output may end, or when nothing else can
  // follow.
  const uint8_t end = complete() || !any ? 1 : 0;
  for (int32_t t : end_tokens_) {
    if (t >= 0 && static_cast<size_t>(t) < allowed_.size()) allowed_[static_cast<size_t>(t)] = end;
  }
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (allowed_[i] == 0) logits[i] = kNever;
  }
}

void GrammarConstraint::Accept(int32_t token) {
  if (std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end()) return;
  const std::string* bytes = vocabulary_->bytes(token);
  if (bytes == nullptr) return;
  if (states_.size() >= max_states_) {
    std::vector<int32_t> none;
    Compact(&none);
  }
  int32_t state = current_;
  for (char c : *bytes) {
    state = Step(state, static_cast<uint8_t>(c));
    if (state == kRefused) return;  // (not drawn from a masked row: the answer stays as it was)
  }
  current_ = state;
}

}  // namespace sy
