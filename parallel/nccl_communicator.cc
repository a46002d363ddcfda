#include "parallel/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <sched.h>

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/nccl_check.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_handles.h"

namespace sy {
namespace {

ncclDataType_t NcclType(DType type) {
  switch (type) {
    case DType::kU8:
      return ncclUint8;
    case DType::kI8:
      return ncclInt8;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
      break;  // weights in blocks: never communicated
  }
  SY_CHECK(false) << "unknown DType " << static_cast<int>(type);
  return ncclUint8;
}

ncclRedOp_t NcclOp(Reduction op) {
  switch (op) {
    case Reduction::kSum:
      return ncclSum;
    case Reduction::kMax:
      return ncclMax;
    case Reduction::kMin:
      return ncclMin;
  }
  SY_CHECK(false) << "unknown Reduction " << static_cast<int>(op);
  return ncclSum;
}

const std::byte* Offset(const void* p, size_t bytes) {
  return static_cast<const std::byte*>(p) + bytes;
}
std::byte* Offset(void* p, size_t bytes) { return static_cast<std::byte*>(p) + bytes; }

// Owns an ncclComm_t: destroyed normally, or aborted when the communicator failed.
class NcclCommHandle {
 public:
  NcclCommHandle() = default;
  explicit NcclCommHandle(ncclComm_t comm) : comm_(comm) {}
  ~NcclCommHandle() {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclCommHandle(const NcclCommHandle&) = delete;
  NcclCommHandle& operator=(const NcclCommHandle&) = delete;
  NcclCommHandle(NcclCommHandle&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  NcclCommHandle& operator=(NcclCommHandle&& other) noexcept {
    if (this != &other) {
      if (comm_ != nullptr) ncclCommDestroy(comm_);
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }

  ncclComm_t get() const { return comm_; }
  // Aborts the communicator's outstanding work and releases it.
  void Abort() {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace

struct NcclCommunicator::Impl {
  NcclCommHandle comm;
  int rank = 0;
  int size = 0;
  int device = 0;
  std::string name;
  NcclCommunicatorOptions options;
  std::unique_ptr<Communicator> host;         // MPI, same ranks and order
  std::unique_ptr<CudaStream> stream;         // the host-synchronous calls run here
  std::unique_ptr<CudaDeviceMemory> scratch;  // one int for Barrier
  Status broken;

  Status Usable(const char* op) const {
    if (broken.ok()) return Status::Ok();
    return FailedPreconditionError(fmt::format(
        "{} on NCCL communicator '{}': the communicator is unusable after an earlier failure ({})",
        op, name, broken.ToString()));
  }

  Result<cudaStream_t> Resolve(const char* op, Stream* s) const {
    if (s == nullptr) return stream->get();
    if (options.resolve_stream != nullptr) {
      return static_cast<cudaStream_t>(options.resolve_stream(*s));
    }
    if (auto* cuda = dynamic_cast<CudaStream*>(s); cuda != nullptr) {
      SY_CHECK_EQ(cuda->device(), device)
          << op << " on NCCL communicator '" << name << "': the stream belongs to another GPU";
      return cuda->get();
    }
    return FailedPreconditionError(fmt::format(
        "{}Async on NCCL communicator '{}': the stream is not a CUDA stream; pass a stream of the "
        "cuda backend on device {}, or set NcclCommunicatorOptions::resolve_stream",
        op, name, device));
  }

  // Enqueues `body` on the call's stream; for the host-synchronous form, waits for it.
  template <typename Body>
  Status Run(const char* op, Stream* s, Body&& body) {
    SY_RETURN_IF_ERROR(Usable(op));
    SY_ASSIGN_OR_RETURN(cudaStream_t cuda_stream, Resolve(op, s));
    ScopedCudaDevice guard(device);
    body(cuda_stream);
    if (s != nullptr) return Status::Ok();
    return WaitStream(op, cuda_stream);
  }

  Status WaitStream(const char* op, cudaStream_t cuda_stream) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    for (int polls = 0;; ++polls) {
      cudaError_t query = cudaStreamQuery(cuda_stream);
      if (query == cudaSuccess) return Status::Ok();
      if (query != cudaErrorNotReady) SY_CUDA_CHECK(query);
      ncclResult_t async = ncclSuccess;
      SY_NCCL_CHECK(ncclCommGetAsyncError(comm.get(), &async));
      SY_CHECK(async == ncclSuccess)
          << op << " on NCCL communicator '" << name << "' (rank " << rank << " of " << size
          << ") failed asynchronously: " << ncclGetErrorString(async);
      if (polls < 64) continue;
      const Clock::duration waited = Clock::now() - start;
      if (options.comm.timeout.count() > 0 && waited >= options.comm.timeout) {
        std::string message = fmt::format(
            "{} on NCCL communicator '{}' (rank {} of {}) did not complete within the {} ms "
            "timeout: a peer rank has not joined it (it crashed, hangs, or called a different "
            "operation). If the peers are only slow, raise CommunicatorOptions::timeout",
            op, name, rank, size, options.comm.timeout.count());
        switch (options.comm.on_timeout) {
          case TimeoutAction::kAbortJob:
            SY_CHECK(false) << message;
            break;
          case TimeoutAction::kReturnError:
            break;
        }
        comm.Abort();
        broken = DeadlineExceededError(message);
        return broken;
      }
      if (waited < std::chrono::milliseconds(2)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }
const std::string& NcclCommunicator::name() const { return impl_->name; }
const CommunicatorOptions& NcclCommunicator::options() const { return impl_->options.comm; }
Communicator& NcclCommunicator::host() { return *impl_->host; }
int NcclCommunicator::device() const { return impl_->device; }
Result<int> NcclCommunicator::NodeLeader() { return impl_->host->NodeLeader(); }

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    MpiCommunicator& bootstrap, const NcclCommunicatorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->rank = bootstrap.rank();
  impl->size = bootstrap.size();
  impl->name = bootstrap.name() + "/nccl";
  SY_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> host,
                      bootstrap.Duplicate(impl->name + "/host", options.comm));

  int gpus = 0;
  cudaError_t count_result = cudaGetDeviceCount(&gpus);
  if (count_result != cudaSuccess) {
    cudaGetLastError();
    gpus = 0;
  }
  // Every rank learns whether all ranks have a GPU before any of them goes on, so a rank without
  // one fails the whole creation instead of leaving the others waiting.
  int32_t have_gpu = gpus > 0 ? 1 : 0;
  SY_RETURN_IF_ERROR(
      host->AllReduceInPlace<int32_t>(std::span<int32_t>(&have_gpu, 1), Reduction::kMin));
  if (have_gpu == 0) {
    return UnavailableError(fmt::format(
        "NcclCommunicator over '{}': at least one rank sees no CUDA device ({} here); run on GPU "
        "machines or use the MPI communicator",
        bootstrap.name(), gpus));
  }
  // Every rank takes part in the same exchanges whatever its options, so that all of them reach
  // the same verdict.
  SY_ASSIGN_OR_RETURN(int leader, host->NodeLeader());
  std::vector<int32_t> leaders(static_cast<size_t>(impl->size));
  SY_RETURN_IF_ERROR(
      host->AllGather<int32_t>(std::span<const int32_t>(&leader, 1), std::span(leaders)));
  int local_rank = 0;
  for (int r = 0; r < impl->rank; ++r) local_rank += leaders[r] == leader ? 1 : 0;
  const int device = options.device < 0 ? local_rank : options.device;
  // NCCL allows one rank per GPU in a communicator: with device -1 that means no more ranks on a
  // machine than GPUs.
  int32_t verdict[2] = {options.device >= 0 || local_rank < gpus ? 1 : 0, device < gpus ? 1 : 0};
  SY_RETURN_IF_ERROR(
      host->AllReduceInPlace<int32_t>(std::span<int32_t>(verdict, 2), Reduction::kMin));
  if (verdict[0] == 0) {
    return UnavailableError(fmt::format(
        "NcclCommunicator over '{}': a machine runs more ranks than it has GPUs (here {}); NCCL "
        "needs one GPU per rank, so launch at most that many ranks per machine",
        bootstrap.name(), gpus));
  }
  if (verdict[1] == 0) {
    return InvalidArgumentError(fmt::format(
        "nccl.device = {} on rank {}, but a rank's machine has fewer GPUs (here: {}); use -1 to "
        "pick the local rank's GPU",
        options.device, impl->rank, gpus));
  }
  impl->device = device;

  ncclUniqueId id{};
  if (impl->rank == 0) SY_NCCL_CHECK(ncclGetUniqueId(&id));
  SY_RETURN_IF_ERROR(host->Broadcast(&id, sizeof(id), DType::kU8, 0));
  // ncclCommInitRank blocks until every rank joins; the timed barrier first makes sure they all
  // reached this point.
  SY_RETURN_IF_ERROR(host->Barrier());
  {
    ScopedCudaDevice guard(device);
    ncclComm_t comm = nullptr;
    SY_NCCL_CHECK(ncclCommInitRank(&comm, impl->size, id, impl->rank));
    impl->comm = NcclCommHandle(comm);
  }
  impl->stream = std::make_unique<CudaStream>(device);
  impl->scratch = std::make_unique<CudaDeviceMemory>(device, sizeof(int32_t));
  impl->host = std::move(host);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl)));
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::Split(int color, int key) {
  SY_CHECK(color >= 0 || color == kNoGroup) << "Split on " << impl_->name << ": color " << color
                                            << " must be >= 0 or Communicator::kNoGroup";
  SY_RETURN_IF_ERROR(impl_->Usable("Split"));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  // The host split doubles as the arrival barrier for the blocking ncclCommSplit.
  SY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> host, impl_->host->Split(color, key));
  ScopedCudaDevice guard(impl_->device);
  ncclComm_t split = nullptr;
  SY_NCCL_CHECK(ncclCommSplit(impl_->comm.get(), color == kNoGroup ? NCCL_SPLIT_NOCOLOR : color,
                              key, &split, nullptr));
  if (color == kNoGroup) return std::unique_ptr<Communicator>();
  auto impl = std::make_unique<Impl>();
  impl->comm = NcclCommHandle(split);
  SY_NCCL_CHECK(ncclCommUserRank(split, &impl->rank));
  SY_NCCL_CHECK(ncclCommCount(split, &impl->size));
  SY_CHECK_EQ(impl->rank, host->rank()) << "NCCL and MPI splits ordered ranks differently";
  impl->device = impl_->device;
  impl->name = fmt::format("{}/split(color={})", impl_->name, color);
  impl->options = impl_->options;
  impl->host = std::move(host);
  impl->stream = std::make_unique<CudaStream>(impl->device);
  impl->scratch = std::make_unique<CudaDeviceMemory>(impl->device, sizeof(int32_t));
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl)));
#else
  return UnimplementedError(fmt::format(
      "Split on NCCL communicator '{}' needs NCCL 2.18 or newer (this build has {}.{}); upgrade "
      "NCCL",
      impl_->name, NCCL_MAJOR, NCCL_MINOR));
#endif
}

Status NcclCommunicator::DoBarrier(Stream* stream) {
  return impl_->Run("Barrier", stream, [&](cudaStream_t s) {
    void* flag = impl_->scratch->get();
    SY_NCCL_CHECK(ncclAllReduce(flag, flag, 1, ncclInt32, ncclSum, impl_->comm.get(), s));
  });
}

Status NcclCommunicator::DoBroadcast(void* data, size_t count, DType type, int root,
                                     Stream* stream) {
  return impl_->Run("Broadcast", stream, [&](cudaStream_t s) {
    SY_NCCL_CHECK(ncclBroadcast(data, data, count, NcclType(type), root, impl_->comm.get(), s));
  });
}

Status NcclCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType type,
                                     Reduction op, Stream* stream) {
  return impl_->Run("AllReduce", stream, [&](cudaStream_t s) {
    SY_NCCL_CHECK(
        ncclAllReduce(send, recv, count, NcclType(type), NcclOp(op), impl_->comm.get(), s));
  });
}

Status NcclCommunicator::DoAllGather(const void* send, size_t count, void* recv, DType type,
                                     Stream* stream) {
  return impl_->Run("AllGather", stream, [&](cudaStream_t s) {
    SY_NCCL_CHECK(ncclAllGather(send, recv, count, NcclType(type), impl_->comm.get(), s));
  });
}

Status NcclCommunicator::DoAllGatherV(const void* send, size_t count, void* recv,
                                      std::span<const size_t> recv_counts,
                                      std::span<const size_t> recv_displs, DType type,
                                      Stream* stream) {
  const size_t elem = DTypeSize(type);
  return impl_->Run("AllGatherV", stream, [&](cudaStream_t s) {
    // One broadcast per contributing rank, fused into a single NCCL group.
    SY_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < impl_->size; ++r) {
      const void* source = r == impl_->rank ? send : Offset(recv, recv_displs[r] * elem);
      SY_NCCL_CHECK(ncclBroadcast(source, Offset(recv, recv_displs[r] * elem), recv_counts[r],
                                  NcclType(type), r, impl_->comm.get(), s));
    }
    SY_NCCL_CHECK(ncclGroupEnd());
  });
}

Status NcclCommunicator::DoReduceScatter(const void* send, void* recv, size_t recv_count,
                                         DType type, Reduction op, Stream* stream) {
  return impl_->Run("ReduceScatter", stream, [&](cudaStream_t s) {
    SY_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, NcclType(type), NcclOp(op),
                                    impl_->comm.get(), s));
  });
}

Status NcclCommunicator::DoAllToAll(const void* send, void* recv, size_t count, DType type,
                                    Stream* stream) {
  const size_t bytes = count * DTypeSize(type);
  return impl_->Run("AllToAll", stream, [&](cudaStream_t s) {
    SY_NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < impl_->size; ++p) {
      SY_NCCL_CHECK(
          ncclSend(Offset(send, p * bytes), count, NcclType(type), p, impl_->comm.get(), s));
      SY_NCCL_CHECK(
          ncclRecv(Offset(recv, p * bytes), count, NcclType(type), p, impl_->comm.get(), s));
    }
    SY_NCCL_CHECK(ncclGroupEnd());
  });
}

Status NcclCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                     std::span<const size_t> send_displs, void* recv,
                                     std::span<const size_t> recv_counts,
                                     std::span<const size_t> recv_displs, DType type,
                                     Stream* stream) {
  const size_t elem = DTypeSize(type);
  return impl_->Run("AllToAllV", stream, [&](cudaStream_t s) {
    // Empty blocks are skipped on both sides: a zero send count here is a zero receive count on
    // the peer, so the pairs still match.
    SY_NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < impl_->size; ++p) {
      if (send_counts[p] > 0) {
        SY_NCCL_CHECK(ncclSend(Offset(send, send_displs[p] * elem), send_counts[p], NcclType(type),
                               p, impl_->comm.get(), s));
      }
      if (recv_counts[p] > 0) {
        SY_NCCL_CHECK(ncclRecv(Offset(recv, recv_displs[p] * elem), recv_counts[p], NcclType(type),
                               p, impl_->comm.get(), s));
      }
    }
    SY_NCCL_CHECK(ncclGroupEnd());
  });
}

Status NcclCommunicator::DoSend(const void* data, size_t count, DType type, int peer, int,
                                Stream* stream) {
  return impl_->Run("Send", stream, [&](cudaStream_t s) {
    SY_NCCL_CHECK(ncclSend(data, count, NcclType(type), peer, impl_->comm.get(), s));
  });
}

Status NcclCommunicator::DoRecv(void* data, size_t count, DType type, int peer, int,
                                Stream* stream) {
  return impl_->Run("Recv", stream, [&](cudaStream_t s) {
    SY_NCCL_CHECK(ncclRecv(data, count, NcclType(type), peer, impl_->comm.get(), s));
  });
}

Status NcclCommunicator::DoCopyBlocks(const void* src, void* dst, std::span<const BlockCopy> blocks,
                                      Stream* stream) {
  return impl_->Run("CopyBlocks", stream, [&](cudaStream_t s) {
    for (const BlockCopy& b : blocks) {
      if (b.bytes == 0) continue;
      SY_CUDA_CHECK(cudaMemcpyAsync(Offset(dst, b.dst_offset), Offset(src, b.src_offset), b.bytes,
                                    cudaMemcpyDeviceToDevice, s));
    }
  });
}

}  // namespace sy
