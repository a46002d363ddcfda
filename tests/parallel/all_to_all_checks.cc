#include "tests/parallel/all_to_all_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "parallel/all_to_all.h"
#include "tests/parallel/collective_checks.h"

namespace sy::testing {
namespace {

constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuard = 0xA5;

uint8_t PatternByte(int src, int dst, size_t element, size_t byte) {
  return static_cast<uint8_t>(src * 131 + dst * 31 + element * 7 + byte * 3 + 1);
}

// A buffer of `bytes` followed by guard bytes.
std::vector<uint8_t> Guarded(size_t bytes, uint8_t fill) {
  std::vector<uint8_t> v(bytes + kGuardBytes, kGuard);
  std::fill(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(bytes), fill);
  return v;
}

bool GuardIntact(const std::vector<uint8_t>& v) {
  return std::all_of(v.end() - kGuardBytes, v.end(), [](uint8_t b) { return b == kGuard; });
}

}  // namespace

std::string CountPatternName(CountPattern pattern) {
  switch (pattern) {
    case CountPattern::kRandom:
      return "random";
    case CountPattern::kEmptyRank:
      return "empty-rank";
    case CountPattern::kSkewed:
      return "skewed";
    case CountPattern::kAllZero:
      return "all-zero";
  }
  return "?";
}

std::vector<size_t> MakeCountMatrix(int size, CountPattern pattern, uint32_t seed,
                                    size_t max_count) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> value(0, max_count);
  std::vector<size_t> counts(static_cast<size_t>(size) * size, 0);
  const int hot = static_cast<int>(seed % static_cast<uint32_t>(size));
  const int empty = static_cast<int>((seed / 7) % static_cast<uint32_t>(size));
  for (int s = 0; s < size; ++s) {
    for (int d = 0; d < size; ++d) {
      size_t c = 0;
      switch (pattern) {
        case CountPattern::kRandom:
        case CountPattern::kEmptyRank:
          c = rng() % 3 == 0 ? 0 : value(rng);
          if (pattern == CountPattern::kEmptyRank && (s == empty || d == empty)) c = 0;
          break;
        case CountPattern::kSkewed:
          c = d == hot ? max_count * 4 + value(rng) : rng() % 2;
          break;
        case CountPattern::kAllZero:
          c = 0;
          break;
      }
      counts[static_cast<size_t>(s) * size + d] = c;
    }
  }
  return counts;
}

void CheckAllToAllAgainstFlat(const Topology& topology, std::span<const size_t> counts,
                              size_t elem_bytes) {
  const int P = topology.world().size();
  const int me = topology.rank();
  ASSERT_EQ(counts.size(), static_cast<size_t>(P) * P);
  std::vector<size_t> row(counts.begin() + static_cast<std::ptrdiff_t>(me) * P,
                          counts.begin() + static_cast<std::ptrdiff_t>(me + 1) * P);

  Result<AllToAll> flat = AllToAll::Create(topology, AllToAllAlgorithm::kFlat);
  ASSERT_TRUE(flat.ok()) << flat.status().ToString();
  Result<AllToAll> hier = AllToAll::Create(topology, AllToAllAlgorithm::kHierarchical);
  ASSERT_TRUE(hier.ok()) << hier.status().ToString();
  Result<AllToAllPlan> flat_plan = flat->MakePlan(row, elem_bytes);
  ASSERT_TRUE(flat_plan.ok()) << flat_plan.status().ToString();
  Result<AllToAllPlan> hier_plan = hier->MakePlan(row, elem_bytes);
  ASSERT_TRUE(hier_plan.ok()) << hier_plan.status().ToString();
  for (int s = 0; s < P; ++s) {
    for (int d = 0; d < P; ++d) {
      ASSERT_EQ(hier_plan->count(s, d), counts[static_cast<size_t>(s) * P + d])
          << "the exchanged count matrix differs at (" << s << ", " << d << ")";
    }
  }
  EXPECT_EQ(flat_plan->workspace_bytes(), 0u);

  // Send: blocks by destination; expected receive: blocks by source.
  const size_t send_bytes = hier_plan->send_elements() * elem_bytes;
  const size_t recv_bytes = hier_plan->recv_elements() * elem_bytes;
  std::vector<uint8_t> send = Guarded(send_bytes, 0);
  std::vector<uint8_t> expected(recv_bytes);
  for (int p = 0; p < P; ++p) {
    const size_t send_at = hier_plan->send_displs()[p] * elem_bytes;
    for (size_t i = 0; i < hier_plan->send_counts()[p]; ++i) {
      for (size_t b = 0; b < elem_bytes; ++b) {
        send[send_at + i * elem_bytes + b] = PatternByte(me, p, i, b);
      }
    }
    const size_t recv_at = hier_plan->recv_displs()[p] * elem_bytes;
    for (size_t i = 0; i < hier_plan->recv_counts()[p]; ++i) {
      for (size_t b = 0; b < elem_bytes; ++b) {
        expected[recv_at + i * elem_bytes + b] = PatternByte(p, me, i, b);
      }
    }
  }
  const std::vector<uint8_t> send_copy = send;

  std::vector<uint8_t> flat_recv = Guarded(recv_bytes, 0xCC);
  ASSERT_TRUE(flat->Forward(*flat_plan, send.data(), flat_recv.data(), nullptr).ok());
  std::vector<uint8_t> workspace = Guarded(hier_plan->workspace_bytes(), 0xDD);
  std::vector<uint8_t> hier_recv = Guarded(recv_bytes, 0xCC);
  HostTestStream stream;
  Status status =
      hier->ForwardAsync(*hier_plan, send.data(), hier_recv.data(), workspace.data(), stream);
  ASSERT_TRUE(status.ok()) << status.ToString();

  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), flat_recv.begin()))
      << "flat all-to-all output differs from the expected layout on rank " << me;
  EXPECT_TRUE(std::equal(flat_recv.begin(), flat_recv.end(), hier_recv.begin()))
      << "hierarchical output differs from flat on rank " << me << " ("
      << topology.layout().ToString() << ")";
  EXPECT_EQ(send, send_copy) << "Forward wrote into its send buffer";
  EXPECT_TRUE(GuardIntact(flat_recv) && GuardIntact(hier_recv) && GuardIntact(workspace))
      << "a write past the end of recv or workspace";

  // Reverse (the combine): everything goes back where it came from.
  std::vector<uint8_t> hier_back = Guarded(send_bytes, 0x11);
  status = hier->Reverse(*hier_plan, hier_recv.data(), hier_back.data(), workspace.data());
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_TRUE(std::equal(send.begin(), send.end(), hier_back.begin()))
      << "hierarchical reverse(forward(x)) != x on rank " << me;
  std::vector<uint8_t> flat_back = Guarded(send_bytes, 0x22);
  ASSERT_TRUE(flat->Reverse(*flat_plan, flat_recv.data(), flat_back.data(), nullptr).ok());
  EXPECT_TRUE(std::equal(send.begin(), send.end(), flat_back.begin()))
      << "flat reverse(forward(x)) != x on rank " << me;
  EXPECT_TRUE(GuardIntact(hier_back) && GuardIntact(flat_back) && GuardIntact(workspace))
      << "a write past the end of the reverse output or workspace";
}

}  // namespace sy::testing
