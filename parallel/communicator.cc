#include "parallel/communicator.h"

namespace sy {

std::string_view ReductionName(Reduction op) {
  switch (op) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kMax:
      return "max";
    case Reduction::kMin:
      return "min";
  }
  return "unknown";
}

void Communicator::CheckRoot(const char* op, int root) const {
  SY_CHECK(root >= 0 && root < size()) << op << " on " << name() << ": root " << root
                                       << " is not a rank of a " << size() << "-rank communicator";
}

void Communicator::CheckPeer(const char* op, int peer) const {
  SY_CHECK(peer >= 0 && peer < size()) << op << " on " << name() << ": peer " << peer
                                       << " is not a rank of a " << size() << "-rank communicator";
}

void Communicator::CheckPerRank(const char* op, const char* what,
                                std::span<const size_t> values) const {
  SY_CHECK_EQ(values.size(), static_cast<size_t>(size()))
      << op << " on " << name() << ": " << what << " needs one entry per rank";
}

void Communicator::CheckBlocks(const char* op, const char* what, size_t elements,
                               std::span<const size_t> counts,
                               std::span<const size_t> displs) const {
  CheckPerRank(op, what, counts);
  CheckPerRank(op, what, displs);
  for (size_t p = 0; p < counts.size(); ++p) {
    SY_CHECK(displs[p] <= elements && counts[p] <= elements - displs[p])
        << op << " on " << name() << ": the " << what << " block of rank " << p << " [" << displs[p]
        << ", " << displs[p] + counts[p] << ") lies outside its " << elements << "-element buffer";
  }
}

namespace {

void CheckReducible(const char* op, DType type) {
  SY_CHECK(type == DType::kI32 || type == DType::kI64 || type == DType::kF32 || type == DType::kF64)
      << op << ": reductions take i32, i64, f32 or f64, not " << DTypeName(type);
}

}  // namespace

// ---- host-synchronous ----

Status Communicator::Barrier() { return DoBarrier(nullptr); }

Status Communicator::Broadcast(void* data, size_t count, DType type, int root) {
  CheckRoot("Broadcast", root);
  return DoBroadcast(data, count, type, root, nullptr);
}

Status Communicator::AllReduce(const void* send, void* recv, size_t count, DType type,
                               Reduction op) {
  CheckReducible("AllReduce", type);
  return DoAllReduce(send, recv, count, type, op, nullptr);
}

Status Communicator::AllGather(const void* send, size_t count, void* recv, DType type) {
  return DoAllGather(send, count, recv, type, nullptr);
}

Status Communicator::AllGatherV(const void* send, size_t count, void* recv,
                                std::span<const size_t> recv_counts,
                                std::span<const size_t> recv_displs, DType type) {
  CheckPerRank("AllGatherV", "recv_counts", recv_counts);
  CheckPerRank("AllGatherV", "recv_displs", recv_displs);
  SY_CHECK_EQ(count, recv_counts[rank()])
      << "AllGatherV on " << name() << ": count must equal recv_counts[rank()]";
  return DoAllGatherV(send, count, recv, recv_counts, recv_displs, type, nullptr);
}

Status Communicator::ReduceScatter(const void* send, void* recv, size_t recv_count, DType type,
                                   Reduction op) {
  CheckReducible("ReduceScatter", type);
  return DoReduceScatter(send, recv, recv_count, type, op, nullptr);
}

Status Communicator::AllToAll(const void* send, void* recv, size_t count, DType type) {
  return DoAllToAll(send, recv, count, type, nullptr);
}

Status Communicator::AllToAllV(const void* send, std::span<const size_t> send_counts,
                               std::span<const size_t> send_displs, void* recv,
                               std::span<const size_t> recv_counts,
                               std::span<const size_t> recv_displs, DType type) {
  CheckPerRank("AllToAllV", "send_counts", send_counts);
  CheckPerRank("AllToAllV", "send_displs", send_displs);
  CheckPerRank("AllToAllV", "recv_counts", recv_counts);
  CheckPerRank("AllToAllV", "recv_displs", recv_displs);
  return DoAllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, type, nullptr);
}

Status Communicator::Send(const void* data, size_t count, DType type, int peer, int tag) {
  CheckPeer("Send", peer);
  return DoSend(data, count, type, peer, tag, nullptr);
}

Status Communicator::Recv(void* data, size_t count, DType type, int peer, int tag) {
  CheckPeer("Recv", peer);
  return DoRecv(data, count, type, peer, tag, nullptr);
}

Status Communicator::CopyBlocks(const void* src, void* dst, std::span<const BlockCopy> blocks) {
  return DoCopyBlocks(src, dst, blocks, nullptr);
}

// ---- stream-ordered ----

Status Communicator::BarrierAsync(Stream& stream) { return DoBarrier(&stream); }

Status Communicator::BroadcastAsync(void* data, size_t count, DType type, int root,
                                    Stream& stream) {
  CheckRoot("BroadcastAsync", root);
  return DoBroadcast(data, count, type, root, &stream);
}

Status Communicator::AllReduceAsync(const void* send, void* recv, size_t count, DType type,
                                    Reduction op, Stream& stream) {
  CheckReducible("AllReduceAsync", type);
  return DoAllReduce(send, recv, count, type, op, &stream);
}

Status Communicator::AllGatherAsync(const void* send, size_t count, void* recv, DType type,
                                    Stream& stream) {
  return DoAllGather(send, count, recv, type, &stream);
}

Status Communicator::AllGatherVAsync(const void* send, size_t count, void* recv,
                                     std::span<const size_t> recv_counts,
                                     std::span<const size_t> recv_displs, DType type,
                                     Stream& stream) {
  CheckPerRank("AllGatherVAsync", "recv_counts", recv_counts);
  CheckPerRank("AllGatherVAsync", "recv_displs", recv_displs);
  SY_CHECK_EQ(count, recv_counts[rank()])
      << "AllGatherVAsync on " << name() << ": count must equal recv_counts[rank()]";
  return DoAllGatherV(send, count, recv, recv_counts, recv_displs, type, &stream);
}

Status Communicator::ReduceScatterAsync(const void* send, void* recv, size_t recv_count, DType type,
                                        Reduction op, Stream& stream) {
  CheckReducible("ReduceScatterAsync", type);
  return DoReduceScatter(send, recv, recv_count, type, op, &stream);
}

Status Communicator::AllToAllAsync(const void* send, void* recv, size_t count, DType type,
                                   Stream& stream) {
  return DoAllToAll(send, recv, count, type, &stream);
}

Status Communicator::AllToAllVAsync(const void* send, std::span<const size_t> send_counts,
                                    std::span<const size_t> send_displs, void* recv,
                                    std::span<const size_t> recv_counts,
                                    std::span<const size_t> recv_displs, DType type,
                                    Stream& stream) {
  CheckPerRank("AllToAllVAsync", "send_counts", send_counts);
  CheckPerRank("AllToAllVAsync", "send_displs", send_displs);
  CheckPerRank("AllToAllVAsync", "recv_counts", recv_counts);
  CheckPerRank("AllToAllVAsync", "recv_displs", recv_displs);
  return DoAllToAllV(send, send_counts, send_displs, recv, recv_counts, recv_displs, type, &stream);
}

Status Communicator::SendAsync(const void* data, size_t count, DType type, int peer, int tag,
                               Stream& stream) {
  CheckPeer("SendAsync", peer);
  return DoSend(data, count, type, peer, tag, &stream);
}

Status Communicator::RecvAsync(void* data, size_t count, DType type, int peer, int tag,
                               Stream& stream) {
  CheckPeer("RecvAsync", peer);
  return DoRecv(data, count, type, peer, tag, &stream);
}

Status Communicator::CopyBlocksAsync(const void* src, void* dst, std::span<const BlockCopy> blocks,
                                     Stream& stream) {
  return DoCopyBlocks(src, dst, blocks, &stream);
}

}  // namespace sy
