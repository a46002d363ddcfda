// TimedCommunicator: a Communicator that forwards every call to another one and adds the wall
// time spent in it to a shared clock, so the trainer can report how much of a step was
// communication (the expert all-to-alls inside Forward and Backward included) and how much was
// compute, as MoESys Fig. 10 does.
//
// Split wraps the new communicator with the same clock, so the sub-communicators a Topology or
// MakeExpertParallelGroups makes from a timed world are timed too. host() is this communicator when
// the wrapped one moves host memory (mpi, local); otherwise the wrapped one's host communicator,
// untimed.
//
// Only calls on the clock's driving thread are timed (see CommunicationClock).
// Ownership: owns the wrapped communicator; the clock is shared by the communicators split from
// this one and outlives them all. Thread-safety: as the wrapped communicator; the clock is only
// written from its driving thread.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "parallel/communicator.h"

namespace sy::launcher {

// Seconds the driving thread (the one that created the clock) spent in communication, accumulated
// by every TimedCommunicator sharing it. Calls from other threads (ZeRO-3's prefetching thread
// runs its all-gathers on a communicator split from a timed one) overlap the step's compute and
// are not counted, so the clock stays single-threaded and the step's phases still add up.
struct CommunicationClock {
  double seconds = 0;
  std::thread::id driver = std::this_thread::get_id();
};

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<CommunicationClock> clock);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view kind() const override { return inner_->kind(); }
  const std::string& name() const override { return inner_->name(); }
  bool host_buffers() const override { return inner_->host_buffers(); }
  const CommunicatorOptions& options() const override { return inner_->options(); }
  Communicator& host() override { return inner_->host_buffers() ? *this : inner_->host(); }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;
  Result<int> NodeLeader() override;

  const std::shared_ptr<CommunicationClock>& clock() const { return clock_; }

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
  // Runs `call`, adding its wall time to the clock.
  template <typename F>
  Status Timed(F&& call);

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<CommunicationClock> clock_;
};

}  // namespace sy::launcher
