#include "parallel/local_communicator.h"

#include <cstring>
#include <utility>

namespace sy {
namespace {

// memcpy that tolerates the empty and in-place cases collectives produce.
void CopyBytes(const void* src, void* dst, size_t bytes) {
  if (bytes == 0 || src == dst) return;
  std::memcpy(dst, src, bytes);
}

}  // namespace

LocalCommunicator::LocalCommunicator(CommunicatorOptions options, std::string name)
    : options_(options), name_(std::move(name)) {}

Result<std::unique_ptr<Communicator>> LocalCommunicator::Split(int color, int key) {
  SY_CHECK(color >= 0 || color == kNoGroup)
      << "Split on " << name_ << ": color " << color << " must be >= 0 or Communicator::kNoGroup";
  if (color == kNoGroup) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>(
      options_, name_ + "/split(color=" + std::to_string(color) + ")"));
}

Status LocalCommunicator::DoBarrier(Stream*) { return Status::Ok(); }

Status LocalCommunicator::DoBroadcast(void*, size_t, DType, int, Stream*) { return Status::Ok(); }

Status LocalCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType type,
                                      Reduction, Stream*) {
  CopyBytes(send, recv, count * DTypeSize(type));
  return Status::Ok();
}

Status LocalCommunicator::DoAllGather(const void* send, size_t count, void* recv, DType type,
                                      Stream*) {
  CopyBytes(send, recv, count * DTypeSize(type));
  return Status::Ok();
}

Status LocalCommunicator::DoAllGatherV(const void* send, size_t count, void* recv,
                                       std::span<const size_t>, std::span<const size_t> recv_displs,
                                       DType type, Stream*) {
  size_t elem = DTypeSize(type);
  CopyBytes(send, static_cast<std::byte*>(recv) + recv_displs[0] * elem, count * elem);
  return Status::Ok();
}

Status LocalCommunicator::DoReduceScatter(const void* send, void* recv, size_t recv_count,
                                          DType type, Reduction, Stream*) {
  CopyBytes(send, recv, recv_count * DTypeSize(type));
  return Status::Ok();
}

Status LocalCommunicator::DoAllToAll(const void* send, void* recv, size_t count, DType type,
                                     Stream*) {
  CopyBytes(send, recv, count * DTypeSize(type));
  return Status::Ok();
}

Status LocalCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                      std::span<const size_t> send_displs, void* recv,
                                      std::span<const size_t> recv_counts,
                                      std::span<const size_t> recv_displs, DType type, Stream*) {
  SY_CHECK_EQ(send_counts[0], recv_counts[0])
      << "AllToAllV on " << name_ << ": rank 0 sends itself a different count than it receives";
  size_t elem = DTypeSize(type);
  CopyBytes(static_cast<const std::byte*>(send) + send_displs[0] * elem,
            static_cast<std::byte*>(recv) + recv_displs[0] * elem, send_counts[0] * elem);
  return Status::Ok();
}

Status LocalCommunicator::DoSend(const void* data, size_t count, DType type, int, int tag,
                                 Stream*) {
  Message message;
  message.tag = tag;
  message.bytes.resize(count * DTypeSize(type));
  CopyBytes(data, message.bytes.data(), message.bytes.size());
  queue_.push_back(std::move(message));
  return Status::Ok();
}

Status LocalCommunicator::DoRecv(void* data, size_t count, DType type, int, int tag, Stream*) {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->tag != tag) continue;
    size_t bytes = count * DTypeSize(type);
    if (it->bytes.size() != bytes) {
      return InvalidArgumentError("Recv on " + name_ + " (tag " + std::to_string(tag) +
                                  "): the matching Send carried " +
                                  std::to_string(it->bytes.size()) + " bytes but Recv expects " +
                                  std::to_string(bytes) + "; Send and Recv counts must match");
    }
    CopyBytes(it->bytes.data(), data, bytes);
    queue_.erase(it);
    return Status::Ok();
  }
  return FailedPreconditionError("Recv on " + name_ + " (tag " + std::to_string(tag) +
                                 "): no matching Send was posted; on a 1-rank communicator the "
                                 "Send must come before the Recv");
}

Status LocalCommunicator::DoCopyBlocks(const void* src, void* dst,
                                       std::span<const BlockCopy> blocks, Stream*) {
  for (const BlockCopy& b : blocks) {
    CopyBytes(static_cast<const std::byte*>(src) + b.src_offset,
              static_cast<std::byte*>(dst) + b.dst_offset, b.bytes);
  }
  return Status::Ok();
}

}  // namespace sy
