#include "parallel/mpi_communicator.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <thread>
#include <vector>

#include "parallel/mpi_check.h"
#include "parallel/mpi_handles.h"

namespace sy {
namespace {

using internal::MpiCommHandle;
using internal::MpiTypeHandle;

// Largest element count issued in one MPI call when a buffer is split into chunks.
constexpr size_t kChunkElements = size_t{1} << 30;

MPI_Datatype BaseType(DType type) {
  switch (type) {
    case DType::kU8:
      return MPI_BYTE;
    case DType::kI8:
      return MPI_INT8_T;
    case DType::kF16:
    case DType::kBF16:
      // Moved, never reduced (Communicator checks that): 16-bit containers.
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
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
  return MPI_DATATYPE_NULL;
}

MPI_Op MpiOp(Reduction op) {
  switch (op) {
    case Reduction::kSum:
      return MPI_SUM;
    case Reduction::kMax:
      return MPI_MAX;
    case Reduction::kMin:
      return MPI_MIN;
  }
  SY_CHECK(false) << "unknown Reduction " << static_cast<int>(op);
  return MPI_OP_NULL;
}

// MPI counts are ints. The number of elements per MPI item such that every value divides exactly
// and fits an int: 1 when they already fit, else their gcd; 0 when no such unit exists.
size_t ChooseUnit(std::initializer_list<std::span<const size_t>> lists) {
  size_t max_value = 0;
  size_t g = 0;
  for (std::span<const size_t> list : lists) {
    for (size_t v : list) {
      max_value = std::max(max_value, v);
      g = std::gcd(g, v);
    }
  }
  if (max_value <= static_cast<size_t>(INT_MAX)) return 1;
  if (g > static_cast<size_t>(INT_MAX) || max_value / g > static_cast<size_t>(INT_MAX)) return 0;
  return g;
}

std::vector<int> ToInts(std::span<const size_t> values, size_t unit) {
  std::vector<int> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<int>(values[i] / unit);
  return out;
}

MpiTypeHandle UnitType(DType type, size_t unit) {
  if (unit == 1) return MpiTypeHandle(BaseType(type), /*owned=*/false);
  MPI_Datatype derived = MPI_DATATYPE_NULL;
  SY_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(unit), BaseType(type), &derived));
  SY_MPI_CHECK(MPI_Type_commit(&derived));
  return MpiTypeHandle(derived, /*owned=*/true);
}

Status TooLarge(const char* op, const std::string& name) {
  return InvalidArgumentError(fmt::format(
      "{} on MPI communicator '{}': counts or displacements exceed MPI's 2^31-1 limit and share "
      "no common factor that brings them under it; split the exchange into smaller calls",
      op, name));
}

const std::byte* Offset(const void* p, size_t bytes) {
  return static_cast<const std::byte*>(p) + bytes;
}
std::byte* Offset(void* p, size_t bytes) { return static_cast<std::byte*>(p) + bytes; }

}  // namespace

struct MpiCommunicator::Impl {
  MpiCommHandle comm;
  int rank = 0;
  int size = 0;
  std::string name;
  CommunicatorOptions options;
  Status broken;                      // first error that made the communicator unusable
  std::vector<MPI_Request> stranded;  // timed-out requests MPI still owns

  Status Usable(const char* op) const {
    if (broken.ok()) return Status::Ok();
    return FailedPreconditionError(fmt::format(
        "{} on MPI communicator '{}': the communicator is unusable after an earlier failure ({})",
        op, name, broken.ToString()));
  }

  // Completes `requests` or fails at the deadline. `statuses` (optional) receives their statuses.
  Status Wait(const char* op, std::vector<MPI_Request>& requests,
              std::vector<MPI_Status>* statuses = nullptr, bool cancellable = false) {
    if (requests.empty()) return Status::Ok();
    std::vector<MPI_Status> local(requests.size());
    std::vector<MPI_Status>& st = statuses != nullptr ? *statuses : local;
    st.resize(requests.size());
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      SY_MPI_CHECK(
          MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, st.data()));
      if (done != 0) return Status::Ok();
      // Spinning first keeps small collectives fast; yielding and then sleeping lets
      // oversubscribed ranks (several per core) run their side of the exchange.
      if (polls < 64) continue;
      const Clock::duration waited = Clock::now() - start;
      if (options.timeout.count() > 0 && waited >= options.timeout) {
        return TimedOut(op, requests, cancellable);
      }
      if (waited < std::chrono::milliseconds(2)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  Status TimedOut(const char* op, std::vector<MPI_Request>& requests, bool cancellable) {
    std::string message = fmt::format(
        "{} on MPI communicator '{}' (rank {} of {}) did not complete within the {} ms timeout: "
        "a peer rank has not joined it (it crashed, hangs, or called a different operation). If "
        "the peers are only slow, raise CommunicatorOptions::timeout",
        op, name, rank, size, options.timeout.count());
    switch (options.on_timeout) {
      case TimeoutAction::kAbortJob:
        SY_CHECK(false) << message;
        break;
      case TimeoutAction::kReturnError:
        break;
    }
    if (cancellable && CancelAll(requests)) return DeadlineExceededError(message);
    for (MPI_Request r : requests) {
      if (r != MPI_REQUEST_NULL) stranded.push_back(r);
    }
    broken = DeadlineExceededError(message);
    return broken;
  }

  // Cancels pending receives; true when every request is complete or cancelled afterwards.
  bool CancelAll(std::vector<MPI_Request>& requests) {
    for (MPI_Request& r : requests) {
      if (r != MPI_REQUEST_NULL) SY_MPI_CHECK(MPI_Cancel(&r));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (std::chrono::steady_clock::now() < deadline) {
      int done = 0;
      SY_MPI_CHECK(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                               MPI_STATUSES_IGNORE));
      if (done != 0) return true;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }

  // A barrier against the deadline before a blocking MPI call that has no non-blocking form, so
  // that the blocking call only starts once every rank has arrived.
  Status ArrivalBarrier(const char* op) {
    std::vector<MPI_Request> requests(1);
    SY_MPI_CHECK(MPI_Ibarrier(comm.get(), &requests[0]));
    return Wait(op, requests);
  }
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiCommunicator::~MpiCommunicator() = default;

std::unique_ptr<MpiCommunicator> MpiCommunicator::CreateWorld(const CommunicatorOptions& options) {
  MPI_Comm dup = MPI_COMM_NULL;
  SY_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  SY_MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  auto impl = std::make_unique<Impl>();
  impl->comm = MpiCommHandle(dup);
  SY_MPI_CHECK(MPI_Comm_rank(dup, &impl->rank));
  SY_MPI_CHECK(MPI_Comm_size(dup, &impl->size));
  impl->name = "world";
  impl->options = options;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl)));
}

int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::size() const { return impl_->size; }
const std::string& MpiCommunicator::name() const { return impl_->name; }
const CommunicatorOptions& MpiCommunicator::options() const { return impl_->options; }
Status MpiCommunicator::health() const { return impl_->broken; }

Result<std::unique_ptr<Communicator>> MpiCommunicator::Split(int color, int key) {
  SY_CHECK(color >= 0 || color == kNoGroup) << "Split on " << impl_->name << ": color " << color
                                            << " must be >= 0 or Communicator::kNoGroup";
  SY_RETURN_IF_ERROR(impl_->Usable("Split"));
  SY_RETURN_IF_ERROR(impl_->ArrivalBarrier("Split"));
  MPI_Comm split = MPI_COMM_NULL;
  SY_MPI_CHECK(
      MPI_Comm_split(impl_->comm.get(), color == kNoGroup ? MPI_UNDEFINED : color, key, &split));
  if (split == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  SY_MPI_CHECK(MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN));
  auto impl = std::make_unique<Impl>();
  impl->comm = MpiCommHandle(split);
  SY_MPI_CHECK(MPI_Comm_rank(split, &impl->rank));
  SY_MPI_CHECK(MPI_Comm_size(split, &impl->size));
  impl->name = fmt::format("{}/split(color={})", impl_->name, color);
  impl->options = impl_->options;
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(impl)));
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Duplicate(std::string name,
                                                                    CommunicatorOptions options) {
  SY_RETURN_IF_ERROR(impl_->Usable("Duplicate"));
  SY_RETURN_IF_ERROR(impl_->ArrivalBarrier("Duplicate"));
  MPI_Comm dup = MPI_COMM_NULL;
  SY_MPI_CHECK(MPI_Comm_dup(impl_->comm.get(), &dup));
  SY_MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  auto impl = std::make_unique<Impl>();
  impl->comm = MpiCommHandle(dup);
  impl->rank = impl_->rank;
  impl->size = impl_->size;
  impl->name = std::move(name);
  impl->options = options;
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl)));
}

Result<int> MpiCommunicator::NodeLeader() {
  SY_RETURN_IF_ERROR(impl_->Usable("NodeLeader"));
  SY_RETURN_IF_ERROR(impl_->ArrivalBarrier("NodeLeader"));
  MPI_Comm shared_raw = MPI_COMM_NULL;
  SY_MPI_CHECK(MPI_Comm_split_type(impl_->comm.get(), MPI_COMM_TYPE_SHARED, impl_->rank,
                                   MPI_INFO_NULL, &shared_raw));
  MpiCommHandle shared(shared_raw);
  SY_MPI_CHECK(MPI_Comm_set_errhandler(shared.get(), MPI_ERRORS_RETURN));
  int mine = impl_->rank;
  int leader = -1;
  std::vector<MPI_Request> requests(1);
  SY_MPI_CHECK(MPI_Iallreduce(&mine, &leader, 1, MPI_INT, MPI_MIN, shared.get(), &requests[0]));
  SY_RETURN_IF_ERROR(impl_->Wait("NodeLeader", requests));
  return leader;
}

Status MpiCommunicator::DoBarrier(Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("Barrier"));
  std::vector<MPI_Request> requests(1);
  SY_MPI_CHECK(MPI_Ibarrier(impl_->comm.get(), &requests[0]));
  return impl_->Wait("Barrier", requests);
}

Status MpiCommunicator::DoBroadcast(void* data, size_t count, DType type, int root, Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("Broadcast"));
  const size_t elem = DTypeSize(type);
  std::vector<MPI_Request> requests;
  size_t offset = 0;
  do {
    const size_t n = std::min(count - offset, kChunkElements);
    requests.emplace_back();
    SY_MPI_CHECK(MPI_Ibcast(Offset(data, offset * elem), static_cast<int>(n), BaseType(type), root,
                            impl_->comm.get(), &requests.back()));
    offset += n;
  } while (offset < count);
  return impl_->Wait("Broadcast", requests);
}

Status MpiCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType type,
                                    Reduction op, Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("AllReduce"));
  const size_t elem = DTypeSize(type);
  const bool in_place = send == recv;
  std::vector<MPI_Request> requests;
  size_t offset = 0;
  do {
    const size_t n = std::min(count - offset, kChunkElements);
    requests.emplace_back();
    SY_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : Offset(send, offset * elem),
                                Offset(recv, offset * elem), static_cast<int>(n), BaseType(type),
                                MpiOp(op), impl_->comm.get(), &requests.back()));
    offset += n;
  } while (offset < count);
  return impl_->Wait("AllReduce", requests);
}

Status MpiCommunicator::DoAllGather(const void* send, size_t count, void* recv, DType type,
                                    Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("AllGather"));
  const size_t unit = ChooseUnit({std::span<const size_t>(&count, 1)});
  if (unit == 0) return TooLarge("AllGather", impl_->name);
  MpiTypeHandle t = UnitType(type, unit);
  const int n = static_cast<int>(count / unit);
  std::vector<MPI_Request> requests(1);
  SY_MPI_CHECK(MPI_Iallgather(send, n, t.get(), recv, n, t.get(), impl_->comm.get(), &requests[0]));
  return impl_->Wait("AllGather", requests);
}

Status MpiCommunicator::DoAllGatherV(const void* send, size_t count, void* recv,
                                     std::span<const size_t> recv_counts,
                                     std::span<const size_t> recv_displs, DType type, Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("AllGatherV"));
  const size_t unit = ChooseUnit({recv_counts, recv_displs});
  if (unit == 0) return TooLarge("AllGatherV", impl_->name);
  MpiTypeHandle t = UnitType(type, unit);
  std::vector<int> counts = ToInts(recv_counts, unit);
  std::vector<int> displs = ToInts(recv_displs, unit);
  std::vector<MPI_Request> requests(1);
  SY_MPI_CHECK(MPI_Iallgatherv(send, static_cast<int>(count / unit), t.get(), recv, counts.data(),
                               displs.data(), t.get(), impl_->comm.get(), &requests[0]));
  return impl_->Wait("AllGatherV", requests);
}

Status MpiCommunicator::DoReduceScatter(const void* send, void* recv, size_t recv_count, DType type,
                                        Reduction op, Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("ReduceScatter"));
  if (recv_count > static_cast<size_t>(INT_MAX)) return TooLarge("ReduceScatter", impl_->name);
  std::vector<MPI_Request> requests(1);
  SY_MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, static_cast<int>(recv_count), BaseType(type),
                                         MpiOp(op), impl_->comm.get(), &requests[0]));
  return impl_->Wait("ReduceScatter", requests);
}

Status MpiCommunicator::DoAllToAll(const void* send, void* recv, size_t count, DType type,
                                   Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("AllToAll"));
  const size_t unit = ChooseUnit({std::span<const size_t>(&count, 1)});
  if (unit == 0) return TooLarge("AllToAll", impl_->name);
  MpiTypeHandle t = UnitType(type, unit);
  const int n = static_cast<int>(count / unit);
  std::vector<MPI_Request> requests(1);
  SY_MPI_CHECK(MPI_Ialltoall(send, n, t.get(), recv, n, t.get(), impl_->comm.get(), &requests[0]));
  return impl_->Wait("AllToAll", requests);
}

Status MpiCommunicator::DoAllToAllV(const void* send, std::span<const size_t> send_counts,
                                    std::span<const size_t> send_displs, void* recv,
                                    std::span<const size_t> recv_counts,
                                    std::span<const size_t> recv_displs, DType type, Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("AllToAllV"));
  const size_t unit = ChooseUnit({send_counts, send_displs, recv_counts, recv_displs});
  if (unit == 0) return TooLarge("AllToAllV", impl_->name);
  MpiTypeHandle t = UnitType(type, unit);
  std::vector<int> sc = ToInts(send_counts, unit);
  std::vector<int> sd = ToInts(send_displs, unit);
  std::vector<int> rc = ToInts(recv_counts, unit);
  std::vector<int> rd = ToInts(recv_displs, unit);
  std::vector<MPI_Request> requests(1);
  SY_MPI_CHECK(MPI_Ialltoallv(send, sc.data(), sd.data(), t.get(), recv, rc.data(), rd.data(),
                              t.get(), impl_->comm.get(), &requests[0]));
  return impl_->Wait("AllToAllV", requests);
}

Status MpiCommunicator::DoSend(const void* data, size_t count, DType type, int peer, int tag,
                               Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("Send"));
  const size_t elem = DTypeSize(type);
  std::vector<MPI_Request> requests;
  size_t offset = 0;
  do {
    const size_t n = std::min(count - offset, kChunkElements);
    requests.emplace_back();
    SY_MPI_CHECK(MPI_Isend(Offset(data, offset * elem), static_cast<int>(n), BaseType(type), peer,
                           tag, impl_->comm.get(), &requests.back()));
    offset += n;
  } while (offset < count);
  return impl_->Wait("Send", requests);
}

Status MpiCommunicator::DoRecv(void* data, size_t count, DType type, int peer, int tag, Stream*) {
  SY_RETURN_IF_ERROR(impl_->Usable("Recv"));
  const size_t elem = DTypeSize(type);
  std::vector<MPI_Request> requests;
  std::vector<size_t> expected;
  size_t offset = 0;
  do {
    const size_t n = std::min(count - offset, kChunkElements);
    requests.emplace_back();
    expected.push_back(n);
    SY_MPI_CHECK(MPI_Irecv(Offset(data, offset * elem), static_cast<int>(n), BaseType(type), peer,
                           tag, impl_->comm.get(), &requests.back()));
    offset += n;
  } while (offset < count);
  std::vector<MPI_Status> statuses;
  SY_RETURN_IF_ERROR(impl_->Wait("Recv", requests, &statuses, /*cancellable=*/true));
  for (size_t i = 0; i < statuses.size(); ++i) {
    int got = 0;
    SY_MPI_CHECK(MPI_Get_count(&statuses[i], BaseType(type), &got));
    if (static_cast<size_t>(got) != expected[i]) {
      return InvalidArgumentError(fmt::format(
          "Recv on MPI communicator '{}' from rank {} (tag {}): received {} of the {} {} elements "
          "expected; Send and Recv counts must match",
          impl_->name, peer, tag, got, expected[i], DTypeName(type)));
    }
  }
  return Status::Ok();
}

Status MpiCommunicator::DoCopyBlocks(const void* src, void* dst, std::span<const BlockCopy> blocks,
                                     Stream*) {
  for (const BlockCopy& b : blocks) {
    if (b.bytes == 0) continue;
    std::memcpy(Offset(dst, b.dst_offset), Offset(src, b.src_offset), b.bytes);
  }
  return Status::Ok();
}

}  // namespace sy
