// NcclCommunicator: a Communicator over NCCL, moving device memory of this rank's GPU.
//
// Created collectively over an MPI communicator (the bootstrap): rank 0 makes the ncclUniqueId
// and broadcasts it over MPI, then every rank joins with ncclCommInitRank. The NCCL communicator
// has the bootstrap's ranks in the same order, and keeps a duplicate of the bootstrap as host(),
// which serves NodeLeader and host-memory exchanges (all-to-all plans). Built only when
// SY_HAVE_NCCL (runtime/core/build_info.h); this header itself includes no CUDA or NCCL headers.
//
// Ordering. The *Async calls are enqueued on the given stream, which must be a CUDA stream of
// device() (a stream from the cuda backend, or whatever NcclCommunicatorOptions::resolve_stream
// maps), and return at once. The plain calls are enqueued on an internal stream and waited for,
// so their inputs must be ready (synchronize the stream that produced them first). Several
// collectives of one communicator must be enqueued in the same order on every rank.
//
// Failure. A plain call that does not complete within options().timeout follows on_timeout:
// kAbortJob aborts through the fatal handler (MPI_Abort); kReturnError aborts the NCCL
// communicator (ncclCommAbort), returns DeadlineExceeded, and every later call returns
// FailedPrecondition. An asynchronous NCCL error (a peer failed) aborts the job.
//
// Ownership: owns the ncclComm_t, its internal stream and a small device scratch buffer; copy is
// deleted. MPI (MpiEnvironment) must outlive it. Thread-safety: one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace sy {

struct NcclCommunicatorOptions {
  // The GPU this rank drives; -1 = its local rank on the node (Create fails with Unavailable
  // when a machine runs more ranks than it has GPUs). Default: -1.
  int device = -1;
  // Timeout and timeout action of the host-synchronous calls. Default: CommunicatorOptions{}.
  CommunicatorOptions comm;
  // Maps a sy::Stream to its cudaStream_t (returned as void*) for the *Async calls. Default:
  // nullptr = accept the cuda backend's own streams.
  void* (*resolve_stream)(Stream& stream) = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`. Unavailable when a rank has no GPU or a machine runs more ranks
  // than it has GPUs; InvalidArgument when options.device names a GPU that does not exist.
  // Every rank gets the same outcome.
  static Result<std::unique_ptr<NcclCommunicator>> Create(
      MpiCommunicator& bootstrap, const NcclCommunicatorOptions& options = {});
  ~NcclCommunicator() override;

  int rank() const override;
  int size() const override;
  std::string_view kind() const override { return "nccl"; }
  const std::string& name() const override;
  bool host_buffers() const override { return false; }
  const CommunicatorOptions& options() const override;
  Communicator& host() override;

  // ncclCommSplit together with the same split of host().
  Result<std::unique_ptr<Communicator>> Split(int color, int key) override;
  Result<int> NodeLeader() override;

  int device() const;

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
  struct Impl;
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sy
