// Communicator: the one interface every collective backend implements (mpi, nccl, local).
//
// A Communicator is a group of `size()` ranks; this process is `rank()`. Every collective must be
// called by every rank of the group, in the same order, with matching arguments (a rank with
// nothing to send still joins, with zero counts). Implementations:
//   MpiCommunicator   (parallel/mpi_communicator.h)   host buffers, OpenMPI
//   NcclCommunicator  (parallel/nccl_communicator.h)  device buffers, bootstrapped through MPI
//   LocalCommunicator (parallel/local_communicator.h) one process, size 1: collectives are copies
//
// Buffers. host_buffers() says whether the pointers passed in are host memory (mpi, local) or
// device memory of this rank's GPU (nccl). Counts and displacements are in elements of the given
// DType (runtime/core/dtype.h); a byte buffer uses DType::kU8. Every dtype can be moved; the
// reductions (AllReduce, ReduceScatter) take i32, i64, f32 or f64. Send and receive buffers must
// not overlap, except where a call says it works in place (AllReduce with send == recv).
//
// Ordering. The plain calls are host-synchronous: they return once this rank's part is complete
// and the output buffer may be read. They expect their inputs to be ready (for nccl: device work
// that produced them has finished). The *Async calls take a sy::Stream and are stream-ordered: on
// nccl they are enqueued on that stream and return at once; on mpi and local they run
// synchronously on the calling thread (the host buffers must be ready when the call is made), so
// their result is complete on return, which satisfies any later stream order.
//
// Failure. Misuse (wrong span sizes, bad root or peer, a reduction on u8, i8, f16 or bf16) is a
// broken invariant and fails an SY_CHECK. A peer that never joins a call is reported after
// CommunicatorOptions::timeout, as CommunicatorOptions::on_timeout chooses: either the job is
// aborted through the fatal handler (default), or the call returns DeadlineExceeded and the
// communicator is unusable afterwards (later calls return FailedPrecondition). A timed-out
// collective cannot be cancelled in MPI: its buffers may still be written by a late peer, so keep
// them alive and end the job after reporting the error.
//
// Ownership: Split returns a new communicator owned by the caller; it may outlive its parent but
// not the environment that created the root communicator (MpiEnvironment).
// Thread-safety: one thread at a time per communicator. Different communicators may be used from
// different threads only when MPI was initialised with MpiThreadLevel::kMultiple.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "runtime/backend/backend.h"
#include "runtime/core/check.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

namespace sy {

enum class Reduction : uint8_t { kSum, kMax, kMin };
std::string_view ReductionName(Reduction op);  // "sum", "max", "min"

// What a call does when its peers have not completed it within the timeout.
enum class TimeoutAction : uint8_t {
  kAbortJob,     // fail through the fatal handler: in an MPI job, MPI_Abort ends every rank
  kReturnError,  // return DeadlineExceeded; the communicator is unusable afterwards
};

struct CommunicatorOptions {
  // How long a host-synchronous call waits for its peers. 0 = forever (a lost rank then hangs the
  // job). Async NCCL calls are not timed here; the host call that waits for their stream is.
  // Default: 5 minutes.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // Default: kAbortJob, so that no job hangs and every rank ends with the message.
  TimeoutAction on_timeout = TimeoutAction::kAbortJob;
};

// One contiguous block moved by Communicator::CopyBlocks (offsets and length in bytes).
struct BlockCopy {
  size_t src_offset = 0;
  size_t dst_offset = 0;
  size_t bytes = 0;
};

class Communicator {
 public:
  // Split color of a rank that wants no new communicator (it receives nullptr).
  static constexpr int kNoGroup = -1;

  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view kind() const = 0;  // "mpi", "nccl", "local"
  // A name for messages: "world", "world/split(color=1)", ...
  virtual const std::string& name() const = 0;
  virtual bool host_buffers() const = 0;
  virtual const CommunicatorOptions& options() const = 0;

  // A communicator over the same ranks, in the same order, that moves host memory: this one for
  // mpi and local, the bootstrap MPI communicator for nccl. Owned by this communicator.
  virtual Communicator& host() = 0;

  // Collective. Ranks with the same color form a new communicator, ordered by (key, old rank).
  // color must be >= 0 or kNoGroup (that rank gets nullptr). The new one inherits options().
  virtual Result<std::unique_ptr<Communicator>> Split(int color, int key) = 0;

  // Collective. The lowest rank of this communicator that shares memory (runs on the same
  // machine) as the calling rank: equal on every rank of a node, distinct across nodes.
  virtual Result<int> NodeLeader() = 0;

  // ---- host-synchronous calls ----
  Status Barrier();
  // data[count] on root is copied to every rank's data.
  Status Broadcast(void* data, size_t count, DType type, int root);
  // recv[i] = op over ranks of send[i]. In place when send == recv.
  Status AllReduce(const void* send, void* recv, size_t count, DType type, Reduction op);
  // recv[size * count] holds rank r's send[count] at r * count.
  Status AllGather(const void* send, size_t count, void* recv, DType type);
  // Rank r contributes send[recv_counts[r]] (count must equal recv_counts[rank()]); it lands at
  // recv + recv_displs[r]. Both spans have size() entries.
  Status AllGatherV(const void* send, size_t count, void* recv, std::span<const size_t> recv_counts,
                    std::span<const size_t> recv_displs, DType type);
  // send[size * recv_count] is reduced elementwise over ranks; rank r receives block r.
  Status ReduceScatter(const void* send, void* recv, size_t recv_count, DType type, Reduction op);
  // Block p of send[size * count] goes to rank p, which stores it as block rank() of recv.
  Status AllToAll(const void* send, void* recv, size_t count, DType type);
  // send + send_displs[p] holds send_counts[p] elements for rank p; what rank p sends here lands at
  // recv + recv_displs[p] (recv_counts[p] elements, which must equal p's send_counts[rank()]).
  Status AllToAllV(const void* send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_displs, void* recv,
                   std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                   DType type);
  // Point to point. A Recv must name the same count as its Send. MPI matches on (peer, tag); NCCL
  // ignores the tag and matches in call order.
  Status Send(const void* data, size_t count, DType type, int peer, int tag);
  Status Recv(void* data, size_t count, DType type, int peer, int tag);
  // Local, not collective: copies blocks from src to dst in this communicator's memory space
  // (host for mpi and local, device for nccl). src and dst must not overlap.
  Status CopyBlocks(const void* src, void* dst, std::span<const BlockCopy> blocks);

  // ---- stream-ordered variants (see Ordering above) ----
  Status BarrierAsync(Stream& stream);
  Status BroadcastAsync(void* data, size_t count, DType type, int root, Stream& stream);
  Status AllReduceAsync(const void* send, void* recv, size_t count, DType type, Reduction op,
                        Stream& stream);
  Status AllGatherAsync(const void* send, size_t count, void* recv, DType type, Stream& stream);
  Status AllGatherVAsync(const void* send, size_t count, void* recv,
                         std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                         DType type, Stream& stream);
  Status ReduceScatterAsync(const void* send, void* recv, size_t recv_count, DType type,
                            Reduction op, Stream& stream);
  Status AllToAllAsync(const void* send, void* recv, size_t count, DType type, Stream& stream);
  Status AllToAllVAsync(const void* send, std::span<const size_t> send_counts,
                        std::span<const size_t> send_displs, void* recv,
                        std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                        DType type, Stream& stream);
  Status SendAsync(const void* data, size_t count, DType type, int peer, int tag, Stream& stream);
  Status RecvAsync(void* data, size_t count, DType type, int peer, int tag, Stream& stream);
  Status CopyBlocksAsync(const void* src, void* dst, std::span<const BlockCopy> blocks,
                         Stream& stream);

  // ---- typed conveniences (call with an explicit T: comm.AllReduce<float>(a, b, op)) ----
  template <typename T>
  Status AllReduce(std::span<const T> send, std::span<T> recv, Reduction op) {
    SY_CHECK_EQ(send.size(), recv.size()) << "AllReduce: send and recv sizes differ";
    return AllReduce(send.data(), recv.data(), send.size(), DTypeOf<T>::value, op);
  }
  template <typename T>
  Status AllReduceInPlace(std::span<T> data, Reduction op) {
    return AllReduce(data.data(), data.data(), data.size(), DTypeOf<T>::value, op);
  }
  template <typename T>
  Status Broadcast(std::span<T> data, int root) {
    return Broadcast(data.data(), data.size(), DTypeOf<T>::value, root);
  }
  template <typename T>
  Status AllGather(std::span<const T> send, std::span<T> recv) {
    SY_CHECK_EQ(recv.size(), send.size() * static_cast<size_t>(size()))
        << "AllGather: recv must hold size() * send.size() elements";
    return AllGather(send.data(), send.size(), recv.data(), DTypeOf<T>::value);
  }
  // As the untyped forms, with every block checked against the span it lies in.
  template <typename T>
  Status AllGatherV(std::span<const T> send, std::span<T> recv, std::span<const size_t> recv_counts,
                    std::span<const size_t> recv_displs) {
    CheckBlocks("AllGatherV", "recv", recv.size(), recv_counts, recv_displs);
    return AllGatherV(send.data(), send.size(), recv.data(), recv_counts, recv_displs,
                      DTypeOf<T>::value);
  }
  template <typename T>
  Status AllToAllV(std::span<const T> send, std::span<const size_t> send_counts,
                   std::span<const size_t> send_displs, std::span<T> recv,
                   std::span<const size_t> recv_counts, std::span<const size_t> recv_displs) {
    CheckBlocks("AllToAllV", "send", send.size(), send_counts, send_displs);
    CheckBlocks("AllToAllV", "recv", recv.size(), recv_counts, recv_displs);
    return AllToAllV(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs,
                     DTypeOf<T>::value);
  }

 protected:
  Communicator() = default;

  // The implementations. `stream` is null for the host-synchronous calls. Arguments have been
  // validated by the public wrappers.
  virtual Status DoBarrier(Stream* stream) = 0;
  virtual Status DoBroadcast(void* data, size_t count, DType type, int root, Stream* stream) = 0;
  virtual Status DoAllReduce(const void* send, void* recv, size_t count, DType type, Reduction op,
                             Stream* stream) = 0;
  virtual Status DoAllGather(const void* send, size_t count, void* recv, DType type,
                             Stream* stream) = 0;
  virtual Status DoAllGatherV(const void* send, size_t count, void* recv,
                              std::span<const size_t> recv_counts,
                              std::span<const size_t> recv_displs, DType type, Stream* stream) = 0;
  virtual Status DoReduceScatter(const void* send, void* recv, size_t recv_count, DType type,
                                 Reduction op, Stream* stream) = 0;
  virtual Status DoAllToAll(const void* send, void* recv, size_t count, DType type,
                            Stream* stream) = 0;
  virtual Status DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                             std::span<const size_t> send_displs, void* recv,
                             std::span<const size_t> recv_counts,
                             std::span<const size_t> recv_displs, DType type, Stream* stream) = 0;
  virtual Status DoSend(const void* data, size_t count, DType type, int peer, int tag,
                        Stream* stream) = 0;
  virtual Status DoRecv(void* data, size_t count, DType type, int peer, int tag,
                        Stream* stream) = 0;
  virtual Status DoCopyBlocks(const void* src, void* dst, std::span<const BlockCopy> blocks,
                              Stream* stream) = 0;

 private:
  void CheckRoot(const char* op, int root) const;
  void CheckPeer(const char* op, int peer) const;
  void CheckPerRank(const char* op, const char* what, std::span<const size_t> values) const;
  // One (count, displacement) pair per rank, each block inside a buffer of `elements`.
  void CheckBlocks(const char* op, const char* what, size_t elements,
                   std::span<const size_t> counts, std::span<const size_t> displs) const;
};

}  // namespace sy
