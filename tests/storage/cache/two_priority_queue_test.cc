#include "storage/cache/two_priority_queue.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace sy::storage {
namespace {

using Queue = TwoPriorityQueue<int, std::string>;
using PushResult = Queue::PushResult;
constexpr QueuePriority kHigh = QueuePriority::kHigh;
constexpr QueuePriority kLow = QueuePriority::kLow;

// Pops everything, returning the keys in pop order.
std::vector<int> PopAll(Queue& q) {
  std::vector<int> keys;
  while (std::optional<Queue::Entry> e = q.Pop()) keys.push_back(e->key);
  return keys;
}

TEST(TwoPriorityQueueTest, HighBeforeLowFifoWithin) {
  Queue q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.Front(), nullptr);
  EXPECT_FALSE(q.Pop().has_value());
  EXPECT_EQ(q.Push(kLow, 1, "l1"), PushResult::kQueued);
  EXPECT_EQ(q.Push(kHigh, 2, "h2"), PushResult::kQueued);
  EXPECT_EQ(q.Push(kLow, 3, "l3"), PushResult::kQueued);
  EXPECT_EQ(q.Push(kHigh, 4, "h4"), PushResult::kQueued);
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.size(kHigh), 2u);
  EXPECT_EQ(q.size(kLow), 2u);
  ASSERT_NE(q.Front(), nullptr);
  EXPECT_EQ(q.Front()->key, 2);
  EXPECT_EQ(q.Front()->value, "h2");
  EXPECT_EQ(q.Front()->priority, kHigh);
  EXPECT_EQ(PopAll(q), (std::vector<int>{2, 4, 1, 3}));
  EXPECT_TRUE(q.empty());
}

TEST(TwoPriorityQueueTest, DeduplicatesAndPromotes) {
  Queue q;
  q.Push(kLow, 1, "first");
  q.Push(kLow, 2, "two");
  q.Push(kHigh, 3, "three");
  EXPECT_EQ(q.Push(kLow, 1, "again"), PushResult::kAlreadyQueued);
  EXPECT_EQ(q.Push(kLow, 3, "down"), PushResult::kAlreadyQueued);  // never demoted
  EXPECT_EQ(q.Push(kHigh, 3, "same"), PushResult::kAlreadyQueued);
  EXPECT_EQ(q.size(), 3u);
  // A queued LOW pushed at HIGH moves to the back of HIGH and keeps its value.
  EXPECT_EQ(q.Push(kHigh, 1, "promoted"), PushResult::kPromoted);
  EXPECT_EQ(q.size(kHigh), 2u);
  EXPECT_EQ(q.size(kLow), 1u);
  ASSERT_NE(q.Find(1), nullptr);
  EXPECT_EQ(q.Find(1)->value, "first");
  EXPECT_EQ(q.Find(1)->priority, kHigh);
  EXPECT_EQ(PopAll(q), (std::vector<int>{3, 1, 2}));
  // Once popped, a key can be queued again.
  EXPECT_EQ(q.Push(kLow, 1, "later"), PushResult::kQueued);
}

TEST(TwoPriorityQueueTest, EntriesStayPutWhileQueued) {
  Queue q;
  q.Push(kLow, 1, "one");
  Queue::Entry* entry = q.Front();
  for (int k = 10; k < 40; ++k) q.Push(k % 2 ? kHigh : kLow, k, "x");
  q.Push(kHigh, 1);  // promotion moves the entry between FIFOs, not in memory
  EXPECT_EQ(q.Find(1), entry);
  entry->value = "edited in place";
  EXPECT_EQ(q.Cancel(1)->value, "edited in place");
}

TEST(TwoPriorityQueueTest, CancelRemovesOneKeyOfEitherPriority) {
  Queue q;
  q.Push(kHigh, 1, "a");
  q.Push(kLow, 2, "b");
  q.Push(kLow, 3, "c");
  std::optional<Queue::Entry> removed = q.Cancel(2);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->key, 2);
  EXPECT_EQ(removed->priority, kLow);
  EXPECT_EQ(removed->value, "b");
  EXPECT_FALSE(q.Cancel(2).has_value());
  EXPECT_FALSE(q.Cancel(99).has_value());
  EXPECT_EQ(q.Cancel(1)->priority, kHigh);
  EXPECT_EQ(q.Find(1), nullptr);
  EXPECT_EQ(PopAll(q), (std::vector<int>{3}));
}

TEST(TwoPriorityQueueTest, CancelLowSelectsOnlyLowEntries) {
  Queue q;
  for (int k = 0; k < 8; ++k) q.Push(k < 2 ? kHigh : kLow, k, std::to_string(k));
  std::vector<Queue::Entry> removed =
      q.CancelLow([](int key, const std::string&) { return key % 2 == 0; });
  std::vector<int> keys;
  for (const Queue::Entry& e : removed) keys.push_back(e.key);
  EXPECT_EQ(keys, (std::vector<int>{2, 4, 6}));  // 0 is HIGH: kept
  EXPECT_TRUE(q.CancelLow([](int, const std::string& v) { return v == "0"; }).empty());
  EXPECT_EQ(PopAll(q), (std::vector<int>{0, 1, 3, 5, 7}));
}

TEST(TwoPriorityQueueTest, ClearReturnsEverythingHighFirst) {
  Queue q;
  q.Push(kLow, 1, "a");
  q.Push(kHigh, 2, "b");
  q.Push(kLow, 3, "c");
  std::vector<Queue::Entry> all = q.Clear();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].key, 2);
  EXPECT_EQ(all[1].key, 1);
  EXPECT_EQ(all[2].key, 3);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.Find(1), nullptr);
  EXPECT_EQ(q.Push(kLow, 1, "again"), PushResult::kQueued);
}

TEST(TwoPriorityQueueTest, MoveOnlyValuesAndBareKeys) {
  TwoPriorityQueue<int, std::unique_ptr<int>> owning;
  owning.Push(kLow, 7, std::make_unique<int>(70));
  EXPECT_EQ(owning.Push(kHigh, 7, nullptr), decltype(owning)::PushResult::kPromoted);
  std::optional<decltype(owning)::Entry> e = owning.Pop();
  ASSERT_TRUE(e.has_value());
  ASSERT_NE(e->value, nullptr);
  EXPECT_EQ(*e->value, 70);

  TwoPriorityQueue<int> keys;
  keys.Push(kLow, 1);
  keys.Push(kHigh, 2);
  EXPECT_EQ(keys.Pop()->key, 2);
  EXPECT_EQ(keys.Pop()->key, 1);
}

}  // namespace
}  // namespace sy::storage
