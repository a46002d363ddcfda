// ThreadCommunicator (tests only): a Communicator whose ranks are threads of one process, so the
// topology and all-to-all code run end to end in a plain unit test, fast, for any number of
// ranks and any assignment of ranks to "machines" (which NodeLeader reports), including the
// non-node-major numberings a real mpirun can produce.
//
// Every collective posts its arguments on a board shared by the group, meets the others at a
// barrier, reads what it needs from their buffers, and meets them again before returning, so no
// rank returns while another still reads its buffers. Send/Recv go through per-pair mailboxes.
//
// RunThreadGroup(P, machine_of_rank, body) starts P threads, gives each its world communicator
// and joins them. Ownership: the group state is shared by its communicators. Thread-safety: each
// communicator is used by its own thread.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace sy::testing {

struct ThreadGroupState;

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroupState> group, int rank, std::string name);
  ~ThreadCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override;
  std::string_view kind() const override { return "thread"; }
  const std::string& name() const override { return name_; }
  bool host_buffers() const override { return true; }
  const CommunicatorOptions& options() const override { return options_; }
  Communicator& host() override { return *this; }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;
  Result<int> NodeLeader() override;

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
  // Reduces element i of every rank's `send` (at `offset` elements) into out[0..count).
  void Reduce(size_t offset, size_t count, DType type, Reduction op, void* out) const;

  std::shared_ptr<ThreadGroupState> group_;
  int rank_;
  std::string name_;
  CommunicatorOptions options_;
};

// Runs body(world) on `size` threads; machine_of_rank[r] is the machine NodeLeader groups rank r
// by (empty: all on one machine).
void RunThreadGroup(int size, std::vector<int> machine_of_rank,
                    const std::function<void(Communicator& world)>& body);

}  // namespace sy::testing
