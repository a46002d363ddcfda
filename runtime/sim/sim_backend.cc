#include "runtime/sim/sim_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/core/buffer.h"
#include "runtime/core/check.h"

namespace sy {
namespace {

// A SimStream that unregisters itself from its backend when destroyed.
class OwnedSimStream final : public Stream {
 public:
  OwnedSimStream(std::function<void(SimStream*)> on_destroy)
      : stream_(std::make_unique<SimStream>(/*inline_execution=*/false)),
        on_destroy_(std::move(on_destroy)) {}
  ~OwnedSimStream() override {
    stream_->Synchronize();
    on_destroy_(stream_.get());
  }
  SimStream& sim() { return *stream_; }

 private:
  std::unique_ptr<SimStream> stream_;
  std::function<void(SimStream*)> on_destroy_;
};

}  // namespace

SimBackend::SimBackend(const BackendOptions& options)
    : CpuBackend(options),
      options_(options.sim),
      host_to_device_(options.sim.link_gbps, options.sim.link_latency_us),
      device_to_host_(options.sim.link_gbps, options.sim.link_latency_us),
      compute_(std::make_unique<SimStream>(/*inline_execution=*/true)) {
  // Device memory: host memory counted against the budget. The reserved counter is shared with
  // the raw allocator so the budget covers cached blocks too, exactly like real device memory.
  auto reserved = std::make_shared<std::atomic<size_t>>(0);
  size_t budget = options_.memory_bytes;
  allocator_ = std::make_unique<CachingAllocator>(
      Device::Sim(),
      [reserved, budget](size_t bytes) -> void* {
        size_t before = reserved->fetch_add(bytes);
        if (before + bytes > budget) {
          reserved->fetch_sub(bytes);
          return nullptr;
        }
        void* p = AllocateHostMemory(bytes);
        if (p == nullptr) reserved->fetch_sub(bytes);
        return p;
      },
      [reserved](void* p, size_t bytes) {
        std::free(p);
        reserved->fetch_sub(bytes);
      },
      budget);
}

SimBackend::~SimBackend() {
  MutexLock lock(&streams_mutex_);
  SY_CHECK(live_streams_.empty()) << "SimBackend destroyed before " << live_streams_.size()
                                  << " of its streams";
}

BackendCaps SimBackend::caps() const {
  return BackendCaps{.async_copies = true,
                     .pinned_host = true,
                     .host_accessible = false,
                     .quantized_weights = true,
                     .sixteen_bit_activations = true};
}

std::string SimBackend::name() const {
  char text[160];
  std::snprintf(text, sizeof(text), "sim (%.2f GiB, link %.1f GB/s + %.0f us, %d threads)",
                static_cast<double>(options_.memory_bytes) / (1 << 30), options_.link_gbps,
                options_.link_latency_us, pool_->num_threads());
  return text;
}

Result<Tensor> SimBackend::AllocatePinnedHost(DType dtype, Shape shape) {
  SY_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> host,
                      AllocateHostBuffer(DTypeBytes(dtype, shape.numel())));
  // Mark it pinned: the sim link models DMA from page-locked memory.
  void* data = host->data();
  size_t bytes = host->bytes();
  auto pinned = std::make_shared<Buffer>(
      data, bytes, Device::Cpu(), [keep = std::move(host)](void*, size_t) {}, /*pinned=*/true);
  return Tensor(std::move(pinned), dtype, shape);
}

Stream& SimBackend::compute_stream() { return *compute_; }

std::unique_ptr<Stream> SimBackend::CreateStream() {
  auto stream = std::make_unique<OwnedSimStream>([this](SimStream* s) {
    MutexLock lock(&streams_mutex_);
    live_streams_.erase(std::remove(live_streams_.begin(), live_streams_.end(), s),
                        live_streams_.end());
  });
  MutexLock lock(&streams_mutex_);
  live_streams_.push_back(&stream->sim());
  return stream;
}

SimStream& SimBackend::AsSim(Stream& stream) {
  if (&stream == compute_.get()) return *compute_;
  auto* owned = dynamic_cast<OwnedSimStream*>(&stream);
  SY_CHECK(owned != nullptr) << "stream does not belong to the sim backend";
  return owned->sim();
}

std::unique_ptr<Event> SimBackend::CreateEvent() { return std::make_unique<SimEvent>(); }

void SimBackend::RecordEvent(Event& event, Stream& stream) {
  auto* sim_event = dynamic_cast<SimEvent*>(&event);
  SY_CHECK(sim_event != nullptr) << "event does not belong to the sim backend";
  uint64_t generation = sim_event->Arm();
  AsSim(stream).Enqueue([sim_event, generation] { sim_event->Complete(generation); });
}

void SimBackend::StreamWaitEvent(Stream& stream, Event& event) {
  auto* sim_event = dynamic_cast<SimEvent*>(&event);
  SY_CHECK(sim_event != nullptr) << "event does not belong to the sim backend";
  // Waits for the generation armed when this call is made, as cudaStreamWaitEvent does.
  uint64_t generation = sim_event->armed();
  AsSim(stream).Enqueue([sim_event, generation] { sim_event->WaitFor(generation); });
}

void SimBackend::SynchronizeStream(Stream& stream) { AsSim(stream).Synchronize(); }

void SimBackend::ModelCompute(double flops) {
  if (options_.compute_gflops <= 0 || flops <= 0) return;
  std::this_thread::sleep_for(
      std::chrono::duration<double>(flops / (options_.compute_gflops * 1e9)));
}

void SimBackend::Synchronize() {
  std::vector<SimStream*> streams;
  {
    MutexLock lock(&streams_mutex_);
    streams = live_streams_;
  }
  for (SimStream* s : streams) s->Synchronize();
}

void SimBackend::CopyAsync(const Tensor& src, const Tensor& dst, Stream& stream) {
  SY_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel())
      << "CopyAsync " << src.ToString() << " -> " << dst.ToString();
  SY_CHECK(src.is_contiguous() && dst.is_contiguous()) << "CopyAsync of a non-contiguous tensor";
  for (const Tensor* t : {&src, &dst}) {
    SY_CHECK(t->device().is_host() || t->device() == device())
        << "CopyAsync: " << t->ToString() << " is neither host nor sim memory";
  }
  SimLink* link = nullptr;
  if (src.device().is_host() && !dst.device().is_host()) link = &host_to_device_;
  if (!src.device().is_host() && dst.device().is_host()) link = &device_to_host_;
  // The task holds both views (and so their buffers) until the copy has run.
  AsSim(stream).Enqueue([src, dst, link] {
    auto copy = [&] {
      if (src.nbytes() > 0) std::memmove(dst.data(), src.data(), src.nbytes());
    };
    if (link != nullptr) {
      link->Transfer(src.nbytes(), copy);
    } else {
      copy();
    }
  });
}

void SimBackend::ResetLinkStats() {
  host_to_device_.ResetStats();
  device_to_host_.ResetStats();
}

}  // namespace sy
