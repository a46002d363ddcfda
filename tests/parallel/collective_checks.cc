#include "tests/parallel/collective_checks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace sy::testing {
namespace {

constexpr int64_t kSentinel = -777;

template <typename T>
void CheckAllReduceType(Communicator& comm, bool async) {
  const int P = comm.size();
  const int r = comm.rank();
  constexpr size_t kCount = 7;
  HostTestStream stream;
  for (Reduction op : {Reduction::kSum, Reduction::kMax, Reduction::kMin}) {
    std::vector<T> send(kCount), recv(kCount, T(-1));
    for (size_t i = 0; i < kCount; ++i) send[i] = static_cast<T>((r + 1) * (i + 1));
    Status status =
        async ? comm.AllReduceAsync(send.data(), recv.data(), kCount, DTypeOf<T>::value, op, stream)
              : comm.AllReduce<T>(send, recv, op);
    ASSERT_TRUE(status.ok()) << status.ToString();
    std::vector<T> in_place = send;
    status = comm.AllReduceInPlace<T>(in_place, op);
    ASSERT_TRUE(status.ok()) << status.ToString();
    for (size_t i = 0; i < kCount; ++i) {
      T expected{};
      switch (op) {
        case Reduction::kSum:
          expected = static_cast<T>((i + 1) * P * (P + 1) / 2);
          break;
        case Reduction::kMax:
          expected = static_cast<T>((i + 1) * P);
          break;
        case Reduction::kMin:
          expected = static_cast<T>(i + 1);
          break;
      }
      EXPECT_EQ(recv[i], expected)
          << ReductionName(op) << " " << DTypeName(DTypeOf<T>::value) << " element " << i;
      EXPECT_EQ(in_place[i], expected) << "in place " << ReductionName(op) << " element " << i;
    }
  }
}

}  // namespace

void CheckCollectives(Communicator& comm) {
  const int P = comm.size();
  const int r = comm.rank();
  HostTestStream stream;

  for (bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    ASSERT_TRUE((async ? comm.BarrierAsync(stream) : comm.Barrier()).ok());

    // Broadcast from every root.
    for (int root = 0; root < P; ++root) {
      std::vector<int64_t> data(5);
      for (size_t i = 0; i < data.size(); ++i) data[i] = r == root ? root * 100 + i : -1;
      Status status = async
                          ? comm.BroadcastAsync(data.data(), data.size(), DType::kI64, root, stream)
                          : comm.Broadcast<int64_t>(data, root);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], root * 100 + int64_t(i));
    }

    CheckAllReduceType<float>(comm, async);
    CheckAllReduceType<double>(comm, async);
    CheckAllReduceType<int32_t>(comm, async);
    CheckAllReduceType<int64_t>(comm, async);

    // AllGather.
    {
      std::vector<int32_t> send = {r * 10, r * 10 + 1, r * 10 + 2};
      std::vector<int32_t> recv(3 * P, -1);
      Status status = async ? comm.AllGatherAsync(send.data(), 3, recv.data(), DType::kI32, stream)
                            : comm.AllGather<int32_t>(send, recv);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (int p = 0; p < P; ++p) {
        for (int i = 0; i < 3; ++i) EXPECT_EQ(recv[p * 3 + i], p * 10 + i);
      }
    }

    // AllGatherV: rank p contributes p + 1 elements; one sentinel gap after each block.
    {
      std::vector<size_t> counts(P), displs(P);
      size_t total = 0;
      for (int p = 0; p < P; ++p) {
        counts[p] = p + 1;
        displs[p] = total;
        total += counts[p] + 1;
      }
      std::vector<int64_t> send(counts[r]);
      for (size_t i = 0; i < send.size(); ++i) send[i] = r * 100 + int64_t(i);
      std::vector<int64_t> recv(total, kSentinel);
      Status status = async ? comm.AllGatherVAsync(send.data(), send.size(), recv.data(), counts,
                                                   displs, DType::kI64, stream)
                            : comm.AllGatherV<int64_t>(send, recv, counts, displs);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (int p = 0; p < P; ++p) {
        for (size_t i = 0; i < counts[p]; ++i) EXPECT_EQ(recv[displs[p] + i], p * 100 + int64_t(i));
        EXPECT_EQ(recv[displs[p] + counts[p]], kSentinel) << "gap after block " << p;
      }
    }

    // ReduceScatter: block b of rank q holds q + 10 b + j.
    {
      constexpr size_t kBlock = 2;
      std::vector<double> send(kBlock * P);
      for (int b = 0; b < P; ++b) {
        for (size_t j = 0; j < kBlock; ++j) send[b * kBlock + j] = r + 10.0 * b + double(j);
      }
      std::vector<double> recv(kBlock, -1.0);
      Status status = async ? comm.ReduceScatterAsync(send.data(), recv.data(), kBlock, DType::kF64,
                                                      Reduction::kSum, stream)
                            : comm.ReduceScatter(send.data(), recv.data(), kBlock, DType::kF64,
                                                 Reduction::kSum);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (size_t j = 0; j < kBlock; ++j) {
        EXPECT_DOUBLE_EQ(recv[j], P * (10.0 * r + double(j)) + P * (P - 1) / 2.0);
      }
    }

    // AllGather of a 16-bit float dtype: moved as it is, bit for bit.
    {
      std::vector<BF16> send = {F32ToBF16(r + 0.5f), F32ToBF16(-r - 0.25f)};
      std::vector<BF16> recv(2 * P, BF16{0xFFFF});
      Status status = async ? comm.AllGatherAsync(send.data(), 2, recv.data(), DType::kBF16, stream)
                            : comm.AllGather(send.data(), 2, recv.data(), DType::kBF16);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (int p = 0; p < P; ++p) {
        EXPECT_EQ(BF16ToF32(recv[p * 2]), p + 0.5f);
        EXPECT_EQ(BF16ToF32(recv[p * 2 + 1]), -p - 0.25f);
      }
    }

    // AllToAll: block p of rank q is (q, p, j).
    {
      std::vector<int32_t> send(2 * P), recv(2 * P, -1);
      for (int p = 0; p < P; ++p) {
        for (int j = 0; j < 2; ++j) send[p * 2 + j] = r * 1000 + p * 10 + j;
      }
      Status status = async ? comm.AllToAllAsync(send.data(), recv.data(), 2, DType::kI32, stream)
                            : comm.AllToAll(send.data(), recv.data(), 2, DType::kI32);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (int p = 0; p < P; ++p) {
        for (int j = 0; j < 2; ++j) EXPECT_EQ(recv[p * 2 + j], p * 1000 + r * 10 + j);
      }
    }

    // AllToAllV in bytes: rank s sends rank d (s + 2d) % 3 bytes (zeros included); received
    // blocks are laid out in reverse source order with a sentinel byte between them.
    {
      auto count = [](int s, int d) { return static_cast<size_t>((s + 2 * d) % 3); };
      std::vector<size_t> sc(P), sd(P), rc(P), rd(P);
      size_t send_total = 0;
      for (int p = 0; p < P; ++p) {
        sc[p] = count(r, p);
        sd[p] = send_total;
        send_total += sc[p];
      }
      size_t recv_total = 0;
      for (int p = P - 1; p >= 0; --p) {
        rc[p] = count(p, r);
        rd[p] = recv_total;
        recv_total += rc[p] + 1;
      }
      std::vector<uint8_t> send(send_total);
      for (int p = 0; p < P; ++p) {
        for (size_t i = 0; i < sc[p]; ++i) send[sd[p] + i] = uint8_t(r * 16 + p * 4 + i);
      }
      std::vector<uint8_t> recv(recv_total, 0xEE);
      Status status =
          async ? comm.AllToAllVAsync(send.data(), sc, sd, recv.data(), rc, rd, DType::kU8, stream)
                : comm.AllToAllV<uint8_t>(send, sc, sd, recv, rc, rd);
      ASSERT_TRUE(status.ok()) << status.ToString();
      for (int p = 0; p < P; ++p) {
        for (size_t i = 0; i < rc[p]; ++i) {
          EXPECT_EQ(recv[rd[p] + i], uint8_t(p * 16 + r * 4 + i)) << "from " << p;
        }
        EXPECT_EQ(recv[rd[p] + rc[p]], 0xEE) << "gap after the block from " << p;
      }
    }

    // CopyBlocks: local, reverses two blocks.
    {
      std::vector<uint8_t> src = {1, 2, 3, 4, 5}, dst(5, 0);
      std::vector<BlockCopy> blocks = {{0, 3, 2}, {2, 0, 3}};
      Status status = async ? comm.CopyBlocksAsync(src.data(), dst.data(), blocks, stream)
                            : comm.CopyBlocks(src.data(), dst.data(), blocks);
      ASSERT_TRUE(status.ok()) << status.ToString();
      EXPECT_EQ(dst, (std::vector<uint8_t>{3, 4, 5, 1, 2}));
    }
  }
}

void CheckSendRecvRing(Communicator& comm) {
  const int P = comm.size();
  const int r = comm.rank();
  const int next = (r + 1) % P;
  const int prev = (r + P - 1) % P;
  std::vector<int64_t> first = {r, r + 1, r + 2, r + 3};
  std::vector<int64_t> second = {-r, -r - 1};
  ASSERT_TRUE(comm.Send(first.data(), first.size(), DType::kI64, next, 7).ok());
  HostTestStream stream;
  ASSERT_TRUE(comm.SendAsync(second.data(), second.size(), DType::kI64, next, 8, stream).ok());
  std::vector<int64_t> got_second(2, 0), got_first(4, 0);
  Status status = comm.Recv(got_second.data(), 2, DType::kI64, prev, 8);
  ASSERT_TRUE(status.ok()) << status.ToString();
  status = comm.RecvAsync(got_first.data(), 4, DType::kI64, prev, 7, stream);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(got_first, (std::vector<int64_t>{prev, prev + 1, prev + 2, prev + 3}));
  EXPECT_EQ(got_second, (std::vector<int64_t>{-prev, -prev - 1}));
  ASSERT_TRUE(comm.Barrier().ok());
}

void CheckSplit(Communicator& comm) {
  const int P = comm.size();
  const int r = comm.rank();
  // The last rank opts out when there are enough ranks; the rest split by parity, ordered by
  // descending rank (key = -rank).
  const bool opt_out = P > 2 && r == P - 1;
  const int color = opt_out ? Communicator::kNoGroup : r % 2;
  Result<std::unique_ptr<Communicator>> split = comm.Split(color, -r);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  if (opt_out) {
    EXPECT_EQ(*split, nullptr);
    return;
  }
  ASSERT_NE(*split, nullptr);
  Communicator& sub = **split;
  std::vector<int> members;
  for (int q = P - 1; q >= 0; --q) {
    if (q % 2 == r % 2 && !(P > 2 && q == P - 1)) members.push_back(q);
  }
  EXPECT_EQ(sub.size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[sub.rank()], r) << "ranks ordered by key";
  int64_t mine = r;
  int64_t sum = 0;
  ASSERT_TRUE(sub.AllReduce(&mine, &sum, 1, DType::kI64, Reduction::kSum).ok());
  EXPECT_EQ(sum, std::accumulate(members.begin(), members.end(), int64_t{0}));
}

void CheckTopologyCommunicators(const Topology& topology) {
  const NodeLayout& layout = topology.layout();
  int64_t rank = topology.rank();
  int64_t intra_sum = 0;
  int64_t inter_sum = 0;
  ASSERT_TRUE(
      topology.intra_node().AllReduce(&rank, &intra_sum, 1, DType::kI64, Reduction::kSum).ok());
  ASSERT_TRUE(
      topology.inter_node().AllReduce(&rank, &inter_sum, 1, DType::kI64, Reduction::kSum).ok());
  int64_t expected_intra = 0;
  for (int l = 0; l < layout.node_size(topology.node()); ++l) {
    expected_intra += layout.rank_of(topology.node(), l);
  }
  int64_t expected_inter = 0;
  for (int n = 0; n < layout.num_nodes(); ++n) {
    const int r = layout.rank_of(n, topology.local_rank());
    if (r >= 0) expected_inter += r;
  }
  EXPECT_EQ(intra_sum, expected_intra);
  EXPECT_EQ(inter_sum, expected_inter);
  EXPECT_EQ(topology.intra_node().rank(), topology.local_rank());
  EXPECT_EQ(topology.intra_node().size(), layout.node_size(topology.node()));
}

}  // namespace sy::testing
