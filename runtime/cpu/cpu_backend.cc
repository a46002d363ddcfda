#include "runtime/cpu/cpu_backend.h"

#include <cblas.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/core/buffer.h"
#include "runtime/core/check.h"

namespace sy {
namespace {

class CpuStream final : public Stream {};

class CpuEvent final : public Event {
 public:
  void Synchronize() override {}
  bool Query() override { return true; }
};

}  // namespace

CpuBackend::CpuBackend(const BackendOptions& options)
    : compute_stream_(std::make_unique<CpuStream>()) {
  int threads = options.num_threads > 0 ? options.num_threads : ThreadPool::DefaultNumThreads();
  pool_ = std::make_unique<ThreadPool>(threads);
  // OpenBLAS keeps its own threads; give it the same count so the two never oversubscribe.
  openblas_set_num_threads(threads);
  allocator_ = std::make_unique<CachingAllocator>(
      Device::Cpu(), [](size_t bytes) { return AllocateHostMemory(bytes); },
      [](void* p, size_t) { std::free(p); }, /*limit_bytes=*/0);
}

CpuBackend::~CpuBackend() = default;

BackendCaps CpuBackend::caps() const {
  return BackendCaps{.async_copies = false,
                     .pinned_host = false,
                     .host_accessible = true,
                     .quantized_weights = true,
                     .sixteen_bit_activations = true};
}

std::string CpuBackend::name() const {
  return "cpu (" + std::to_string(pool_->num_threads()) + " threads, OpenBLAS)";
}

Result<Tensor> CpuBackend::AllocateDevice(DType dtype, Shape shape) {
  // Rounded up to the host alignment so every tensor starts on a fresh cache line and page.
  size_t bytes = DTypeBytes(dtype, shape.numel());
  size_t aligned = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, allocator_->Allocate(aligned));
  return Tensor(std::move(buffer), dtype, shape);
}

Result<Tensor> CpuBackend::AllocateReleasable(DType dtype, Shape shape) {
  return AllocateDevice(dtype, shape);
}

bool CpuBackend::IsReleasable(const Buffer& buffer) const {
  static const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return reinterpret_cast<uintptr_t>(buffer.data()) % page == 0 && buffer.bytes() % page == 0;
}

void CpuBackend::ReleaseBacking(const Buffer& buffer) {
  SY_CHECK(IsReleasable(buffer)) << "ReleaseBacking of " << buffer.bytes()
                                 << " bytes that are not whole pages";
  if (buffer.bytes() == 0) return;
  // Private anonymous memory: the pages are dropped at once and read back as zeros when touched.
  SY_CHECK(madvise(buffer.data(), buffer.bytes(), MADV_DONTNEED) == 0)
      << "madvise(MADV_DONTNEED) of " << buffer.bytes() << " bytes: " << std::strerror(errno);
}

Status CpuBackend::RestoreBacking(const Buffer& buffer) {
  SY_CHECK(IsReleasable(buffer)) << "RestoreBacking of " << buffer.bytes()
                                 << " bytes that are not whole pages";
  return Status::Ok();
}

Result<Tensor> CpuBackend::AllocatePinnedHost(DType dtype, Shape shape) {
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer,
                      AllocateHostBuffer(DTypeBytes(dtype, shape.numel())));
  return Tensor(std::move(buffer), dtype, shape);
}

MemoryStats CpuBackend::memory_stats() const { return allocator_->stats(); }
void CpuBackend::ResetPeakMemory() { allocator_->ResetPeak(); }
void CpuBackend::EmptyCache() { allocator_->EmptyCache(); }

Stream& CpuBackend::compute_stream() { return *compute_stream_; }
std::unique_ptr<Stream> CpuBackend::CreateStream() { return std::make_unique<CpuStream>(); }
std::unique_ptr<Event> CpuBackend::CreateEvent() { return std::make_unique<CpuEvent>(); }
void CpuBackend::RecordEvent(Event&, Stream&) {}
void CpuBackend::StreamWaitEvent(Stream&, Event&) {}
void CpuBackend::SynchronizeStream(Stream&) {}
void CpuBackend::Synchronize() {}

void CpuBackend::CopyAsync(const Tensor& src, const Tensor& dst, Stream&) {
  SY_CHECK(src.device().is_host() && dst.device().is_host())
      << "CpuBackend::CopyAsync " << src.ToString() << " -> " << dst.ToString();
  SY_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel())
      << "CopyAsync " << src.ToString() << " -> " << dst.ToString();
  SY_CHECK(src.is_contiguous() && dst.is_contiguous()) << "CopyAsync of a non-contiguous tensor";
  if (src.nbytes() > 0) std::memmove(dst.data(), src.data(), src.nbytes());
}

void CpuBackend::CheckOperand(const Tensor& t, const char* what) const {
  SY_CHECK(t.data() != nullptr || t.numel() == 0) << what << ": undefined tensor";
  SY_CHECK(t.is_contiguous()) << what << ": non-contiguous " << t.ToString();
  SY_CHECK(t.device() == device())
      << what << ": " << t.ToString() << " on a " << device().ToString() << " backend";
}

}  // namespace sy
