// LocalCommunicator: a single-process communicator of size 1. Every collective is a copy from the
// send buffer to the receive buffer (nothing when they are the same), so code written against
// Communicator runs unchanged in one process, in tests and on one machine.
//
// Buffers are host memory. Send to rank 0 copies the message into a queue owned by the
// communicator; Recv takes the oldest queued message with the same tag, and fails with
// FailedPrecondition when there is none (in one process nothing else could ever send it).
//
// Ownership: owns its message queue. Thread-safety: one thread at a time.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace sy {

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(CommunicatorOptions options = {}, std::string name = "local");

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view kind() const override { return "local"; }
  const std::string& name() const override { return name_; }
  bool host_buffers() const override { return true; }
  const CommunicatorOptions& options() const override { return options_; }
  Communicator& host() override { return *this; }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;
  Result<int> NodeLeader() override { return 0; }

 protected:
  Status DoBarrier(Stream* stream) override;
  Status DoBroadcast(void* data, size_t count, DType type, int root, Stream* stream) override;
  Status DoAllReduce(const void* send, void* recv, size_t count, DType type, Reduction op,
                     Stream* stream) override;
  Status DoAllGather(const void* send, size_t count, void* recv, DType type,
                     Stream* stream) override;
  Status DoAllGatherV(const void* send, size_t count, void* recv,
                      std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                      DType type, Stream* stream) override;
  Status DoReduceScatter(const void* send, void* recv, size_t recv_count, DType type, Reduction op,
                         Stream* stream) override;
  Status DoAllToAll(const void* send, void* recv, size_t count, DType type,
                    Stream* stream) override;
  Status DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                     std::span<const size_t> send_displs, void* recv,
                     std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                     DType type, Stream* stream) override;
  Status DoSend(const void* data, size_t count, DType type, int peer, int tag,
                Stream* stream) override;
  Status DoRecv(void* data, size_t count, DType type, int peer, int tag, Stream* stream) override;
  Status DoCopyBlocks(const void* src, void* dst, std::span<const BlockCopy> blocks,
                      Stream* stream) override;

 private:
  struct Message {
    int tag = 0;
    std::vector<std::byte> bytes;
  };

  CommunicatorOptions options_;
  std::string name_;
  std::deque<Message> queue_;
};

}  // namespace sy
