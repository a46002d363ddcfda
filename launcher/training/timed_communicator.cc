#include "launcher/training/timed_communicator.h"

#include <chrono>
#include <thread>
#include <utility>

namespace sy::launcher {

TimedCommunicator::TimedCommunicator(std::unique_ptr<Communicator> inner,
                                     std::shared_ptr<CommunicationClock> clock)
    : inner_(std::move(inner)), clock_(std::move(clock)) {
  SY_CHECK(inner_ != nullptr && clock_ != nullptr) << "TimedCommunicator needs a communicator";
}

template <typename F>
Status TimedCommunicator::Timed(F&& call) {
  if (std::this_thread::get_id() != clock_->driver) return call();
  const auto start = std::chrono::steady_clock::now();
  Status s = call();
  clock_->seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

Result<std::unique_ptr<Communicator>> TimedCommunicator::Split(int color, int key) {
  std::unique_ptr<Communicator> split;
  SY_RETURN_IF_ERROR(Timed([&]() -> Status {
    SY_ASSIGN_OR_RETURN(split, inner_->Split(color, key));
    return Status::Ok();
  }));
  if (split == nullptr) return split;
  return std::unique_ptr<Communicator>(new TimedCommunicator(std::move(split), clock_));
}

Result<int> TimedCommunicator::NodeLeader() {
  int leader = 0;
  SY_RETURN_IF_ERROR(Timed([&]() -> Status {
    SY_ASSIGN_OR_RETURN(leader, inner_->NodeLeader());
    return Status::Ok();
  }));
  return leader;
}

// The wrapped communicator validates again; the cost is a few comparisons per call.
Status TimedCommunicator::DoBarrier(Stream* stream) {
  return Timed([&] { return stream ? inner_->BarrierAsync(*stream) : inner_->Barrier(); });
}

Status TimedCommunicator::DoBroadcast(void* data, size_t count, DType type, int root,
                                      Stream* stream) {
  return Timed([&] {
    return stream ? inner_->BroadcastAsync(data, count, type, root, *stream)
                  : inner_->Broadcast(data, count, type, root);
  });
}

Status TimedCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType type,
                                      Reduction op, Stream* stream) {
  return Timed([&] {
    return stream ? inner_->AllReduceAsync(send, recv, count, type, op, *stream)
                  : inner_->AllReduce(send, recv, count, type, op);
  });
}

Status TimedCommunicator::DoAllGather(const void* send, size_t count, void* recv, DType type,
                                      Stream* stream) {
  return Timed([&] {
    return stream ? inner_->AllGatherAsync(send, count, recv, type, *stream)
                  : inner_->AllGather(send, count, recv, type);
  });
}

Status TimedCommunicator::DoAllGatherV(const void* send, size_t count, void* recv,
                                       std::span<const size_t> recv_counts,
                                       std::span<const size_t> recv_displs, DType type,
                                       Stream* stream) {
  return Timed([&] {
    return stream
               ? inner_->AllGatherVAsync(send, count, recv, recv_counts, recv_displs, type, *stream)
               : inner_->AllGatherV(send, count, recv, recv_counts, recv_displs, type);
  });
}

Status TimedCommunicator::DoReduceScatter(const void* send, void* recv, size_t recv_count,
                                          DType type, Reduction op, Stream* stream) {
  return Timed([&] {
    return stream ? inner_->ReduceScatterAsync(send, recv, recv_count, type, op, *stream)
                  : inner_->ReduceScatter(send, recv, recv_count, type, op);
  });
}

Status TimedCommunicator::DoAllToAll(const void* send, void* recv, size_t count, DType type,
                                     Stream* stream) {
  return Timed([&] {
    return stream ? inner_->AllToAllAsync(send, recv, count, type, *stream)
                  : inner_->AllToAll(send, recv, count, type);
  });
}

Status TimedCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                      std::span<const size_t> send_displs, void* recv,
                                      std::span<const size_t> recv_counts,
                                      std::span<const size_t> recv_displs, DType type,
                                      Stream* stream) {
  return Timed([&] {
    return stream ? inner_->AllToAllVAsync(send, send_counts, send_displs, recv, recv_counts,
                                           recv_displs, type, *stream)
                  : inner_->AllToAllV(send, send_counts, send_displs, recv, recv_counts,
                                      recv_displs, type);
  });
}

Status TimedCommunicator::DoSend(const void* data, size_t count, DType type, int peer, int tag,
                                 Stream* stream) {
  return Timed([&] {
    return stream ? inner_->SendAsync(data, count, type, peer, tag, *stream)
                  : inner_->Send(data, count, type, peer, tag);
  });
}

Status TimedCommunicator::DoRecv(void* data, size_t count, DType type, int peer, int tag,
                                 Stream* stream) {
  return Timed([&] {
    return stream ? inner_->RecvAsync(data, count, type, peer, tag, *stream)
                  : inner_->Recv(data, count, type, peer, tag);
  });
}

Status TimedCommunicator::DoCopyBlocks(const void* src, void* dst,
                                       std::span<const BlockCopy> blocks, Stream* stream) {
  // A local copy, not communication: not timed.
  return stream ? inner_->CopyBlocksAsync(src, dst, blocks, *stream)
                : inner_->CopyBlocks(src, dst, blocks);
}

}  // namespace sy::launcher
