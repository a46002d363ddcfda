// SimBackend: a simulated accelerator, so every offloading policy can be tested and measured
// honestly on a machine without a GPU.
//
// - Compute: the CPU backend's operators, run on the calling thread (the compute stream). With
//   SimOptions::compute_gflops, ModelCompute(flops) adds the modelled time of declared work as a
//   sleep (the training step declares its forward and backward; docs/training.md).
// - Memory: host memory behind a device-memory budget (SimOptions::memory_bytes). Allocation past
//   the budget fails with ResourceExhausted, as cudaMalloc does; device memory is not
//   host-accessible through the Backend contract (caps().host_accessible is false), so code that
//   works on sim does not depend on it.
// - Copies: host->device and device->host cross two independent SimLinks throttled to
//   SimOptions::link_gbps and link_latency_us; a copy on a stream created by CreateStream runs on
//   that stream's worker thread, so it overlaps with compute for real. Device->device copies are
//   plain memcpy. A copy is a real memcpy followed by a wait for the modelled end, so the link can
//   never be faster than this host's memcpy bandwidth: calibrate link_gbps below it.
//
// Ownership: owns its links, compute stream and allocator; tensors and streams it returns must
// not outlive it. Thread-safety: as Backend.
#pragma once

#include <memory>
#include <string>

#include "runtime/core/mutex.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/sim/sim_link.h"
#include "runtime/sim/sim_stream.h"

namespace sy {

class SimBackend final : public CpuBackend {
 public:
  explicit SimBackend(const BackendOptions& options = {});
  ~SimBackend() override;

  Device device() const override { return Device::Sim(); }
  BackendCaps caps() const override;
  std::string name() const override;

  Stream& compute_stream() override;
  std::unique_ptr<Stream> CreateStream() override;
  std::unique_ptr<Event> CreateEvent() override;
  void RecordEvent(Event& event, Stream& stream) override;
  void StreamWaitEvent(Stream& stream, Event& event) override;
  void SynchronizeStream(Stream& stream) override;
  void Synchronize() override;
  void ModelCompute(double flops) override;
  void CopyAsync(const Tensor& src, const Tensor& dst, Stream& stream) override;

  const SimOptions& options() const { return options_; }
  SimLinkStats host_to_device_stats() const { return host_to_device_.stats(); }
  SimLinkStats device_to_host_stats() const { return device_to_host_.stats(); }
  void ResetLinkStats();

 private:
  Result<Tensor> AllocatePinnedHost(DType dtype, Shape shape) override;
  SimStream& AsSim(Stream& stream);

  SimOptions options_;
  SimLink host_to_device_;
  SimLink device_to_host_;
  std::unique_ptr<SimStream> compute_;
  Mutex streams_mutex_;
  std::vector<SimStream*> live_streams_ SY_GUARDED_BY(streams_mutex_);  // for Synchronize()
};

}  // namespace sy
