// MpiCommunicator: a Communicator over an MPI communicator (OpenMPI), moving host memory.
//
// Obtain the root one from MpiEnvironment::world(); further ones from Split. Each owns its own
// MPI communicator (a dup or a split, freed on destruction), so its traffic never mixes with
// anyone else's.
//
// Timeouts. Every call is issued in its non-blocking form (MPI_Ibarrier, MPI_Ialltoallv, ...,
// MPI_Isend/MPI_Irecv) and completed by an MPI_Testall loop against the deadline
// options().timeout; calls with no non-blocking form (Split, NodeLeader) first pass a timed
// barrier so they cannot hang on a missing peer. On expiry the message names the call, the
// communicator and the timeout, and options().on_timeout decides (see communicator.h). A timed-out
// Recv is cancelled and leaves the communicator usable when it returns an error; any other timed
// out call leaves it unusable. The wait spins briefly, then yields, then sleeps 50 us between
// tests, so ranks oversubscribed on few cores still make progress.
//
// Counts above 2^31-1 elements: Broadcast, AllReduce, Send and Recv are split into chunks;
// AllGather(V) and AllToAll(V) use a contiguous MPI datatype of g elements (g the gcd of all
// counts and displacements); a call that still cannot be expressed returns InvalidArgument.
//
// Ownership: the environment must outlive every MpiCommunicator. Thread-safety: one thread at a
// time per communicator (see MpiEnvironmentOptions::thread_level for several).
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace sy {

class MpiEnvironment;

class MpiCommunicator final : public Communicator {
 public:
  ~MpiCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string_view kind() const override { return "mpi"; }
  const std::string& name() const override;
  bool host_buffers() const override { return true; }
  const CommunicatorOptions& options() const override;
  Communicator& host() override { return *this; }

  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;
  Result<int> NodeLeader() override;

  // Collective. A communicator over the same ranks with its own traffic and other options.
  Result<std::unique_ptr<MpiCommunicator>> Duplicate(std::string name, CommunicatorOptions options);

  // OK, or the error that made this communicator unusable (a timeout with kReturnError).
  Status health() const;

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
  friend class MpiEnvironment;
  struct Impl;

  explicit MpiCommunicator(std::unique_ptr<Impl> impl);
  // A dup of MPI_COMM_WORLD named "world" (MpiEnvironment only).
  static std::unique_ptr<MpiCommunicator> CreateWorld(const CommunicatorOptions& options);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sy
