// TwoPriorityQueue: the queue of keyed fetches that a prefetcher works through, shared by the
// expert cache's Prefetcher (storage/cache/prefetcher.h) and the offload TransferEngine
// (inference/offload/transfer_engine.h).
//
//   Push(priority, key, value)  queues `key` at the back of its priority's FIFO. A key is queued at
//                               most once: pushing a queued key again changes nothing, except that
//                               a HIGH push of a queued LOW key promotes it to the back of the HIGH
//                               FIFO (keeping its value).
//   Front() / Pop()             the next entry: the front of HIGH, else the front of LOW.
//   Cancel(key)                 removes one entry, whichever its priority.
//   CancelLow(pred)             removes every LOW entry that `pred(key, value)` selects.
//
// Every operation is O(1) but CancelLow (O(LOW entries)) and Clear. An entry's address is stable
// from its Push until it is removed (a promotion moves it between FIFOs without copying it), so a
// worker may keep working on Front() while it stays queued, as the TransferEngine does with a task
// whose chunks are still being copied.
//
// Ownership: the queue owns its entries' keys and values. Thread-safety: none of its own. Its
// owner serialises every call, under the same mutex that guards the owner's other state (both
// owners update their statistics together with the queue).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace sy::storage {

enum class QueuePriority : uint8_t {
  kHigh,  // needed now: served before every LOW entry
  kLow,   // a prediction or a prefetch ahead of need
};

// Key: copyable, hashed by Hash and compared with ==. Value: movable; std::monostate for a queue
// of bare keys.
template <typename Key, typename Value = std::monostate, typename Hash = std::hash<Key>>
class TwoPriorityQueue {
 public:
  struct Entry {
    Key key;
    QueuePriority priority;
    Value value;
  };

  enum class PushResult : uint8_t {
    kQueued,         // the key was not queued: it is now, at the back of `priority`
    kPromoted,       // it was queued LOW and the push was HIGH: moved to the back of HIGH
    kAlreadyQueued,  // it was queued at the same or a higher priority: nothing changed
  };

  TwoPriorityQueue() = default;
  TwoPriorityQueue(const TwoPriorityQueue&) = delete;
  TwoPriorityQueue& operator=(const TwoPriorityQueue&) = delete;

  PushResult Push(QueuePriority priority, const Key& key, Value value = Value{}) {
    auto found = index_.find(key);
    if (found == index_.end()) {
      List& list = ListOf(priority);
      list.push_back(Entry{key, priority, std::move(value)});
      index_.emplace(key, std::prev(list.end()));
      return PushResult::kQueued;
    }
    const auto it = found->second;
    if (priority == QueuePriority::kHigh && it->priority == QueuePriority::kLow) {
      high_.splice(high_.end(), low_, it);
      it->priority = QueuePriority::kHigh;
      return PushResult::kPromoted;
    }
    return PushResult::kAlreadyQueued;
  }

  // The entry Pop would remove, or nullptr when the queue is empty.
  Entry* Front() {
    if (!high_.empty()) return &high_.front();
    if (!low_.empty()) return &low_.front();
    return nullptr;
  }
  const Entry* Front() const { return const_cast<TwoPriorityQueue*>(this)->Front(); }

  std::optional<Entry> Pop() {
    Entry* front = Front();
    if (front == nullptr) return std::nullopt;
    return Remove(index_.find(front->key)->second);
  }

  // The queued entry of `key`, or nullptr.
  Entry* Find(const Key& key) {
    auto found = index_.find(key);
    return found == index_.end() ? nullptr : &*found->second;
  }
  const Entry* Find(const Key& key) const { return const_cast<TwoPriorityQueue*>(this)->Find(key); }

  // Removes `key`'s entry and returns it; nullopt when it is not queued.
  std::optional<Entry> Cancel(const Key& key) {
    auto found = index_.find(key);
    if (found == index_.end()) return std::nullopt;
    return Remove(found->second);
  }

  // Removes every LOW entry e with pred(e.key, e.value) true; returns them in FIFO order.
  template <typename Pred>
  std::vector<Entry> CancelLow(Pred pred) {
    std::vector<Entry> removed;
    for (auto it = low_.begin(); it != low_.end();) {
      const auto next = std::next(it);
      if (pred(std::as_const(it->key), std::as_const(it->value))) removed.push_back(Remove(it));
      it = next;
    }
    return removed;
  }

  // Removes every entry; returns them, HIGH then LOW, each in FIFO order.
  std::vector<Entry> Clear() {
    std::vector<Entry> removed;
    removed.reserve(size());
    for (List* list : {&high_, &low_}) {
      for (Entry& e : *list) removed.push_back(std::move(e));
      list->clear();
    }
    index_.clear();
    return removed;
  }

  size_t size() const { return index_.size(); }
  size_t size(QueuePriority priority) const {
    return priority == QueuePriority::kHigh ? high_.size() : low_.size();
  }
  bool empty() const { return index_.empty(); }

 private:
  using List = std::list<Entry>;

  List& ListOf(QueuePriority priority) { return priority == QueuePriority::kHigh ? high_ : low_; }

  Entry Remove(typename List::iterator it) {
    Entry entry = std::move(*it);
    index_.erase(entry.key);
    ListOf(entry.priority).erase(it);
    return entry;
  }

  List high_;
  List low_;
  std::unordered_map<Key, typename List::iterator, Hash> index_;
};

}  // namespace sy::storage
