// CpuExpertExecutor: runs routed experts on the host, where their weights already are (Fiddler's
// "move activations, not weights"; MoNDE's near-memory side), concurrently with device work.
//
// Run(key, x, y) queues y = expert(x) (inference/offload/swiglu_expert.h) and returns at once
// with a future. One dispatcher thread runs the queued experts in order, each with the CPU
// backend's GEMM/GEMV kernels (bf16, f16 or f32 weights, converted inside the kernel; runtime/cpu)
// parallelised over the executor's own thread pool, so it never competes with the device
// backend's compute thread for a pool.
//
// Note: the executor's CpuBackend sets OpenBLAS's (process-wide) thread count to its own
// num_threads; only f32 weights with more than a few rows reach OpenBLAS.
//
// Ownership: borrows the host source (which must outlive the executor); owns its thread pool and
// dispatcher. x and y must stay alive and untouched until the future is ready. The destructor
// runs what is queued, then joins.
// Thread-safety: Run may be called from any thread.
#pragma once

#include <future>
#include <memory>

#include "inference/offload/host_experts.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/core/thread_pool.h"
#include "runtime/cpu/cpu_backend.h"

namespace sy::offload {

struct CpuExpertExecutorOptions {
  int num_threads = 0;  // compute threads. Default: 0 = SY_NUM_THREADS, or the number of cores
};

class CpuExpertExecutor {
 public:
  explicit CpuExpertExecutor(HostExpertSource& source,
                             const CpuExpertExecutorOptions& options = {});
  ~CpuExpertExecutor();
  CpuExpertExecutor(const CpuExpertExecutor&) = delete;
  CpuExpertExecutor& operator=(const CpuExpertExecutor&) = delete;

  // x f32 [s, H] and y f32 [s, H] in host memory, contiguous (checked). The future holds OK once
  // y is written, or the host source's error (y is then unspecified).
  std::future<Status> Run(ExpertKey key, Tensor x, Tensor y);

  int num_threads() const;

 private:
  HostExpertSource& source_;
  std::unique_ptr<CpuBackend> backend_;  // compute: kernels and their thread pool
  // Declared last, so it is destroyed (drained and joined) first.
  std::unique_ptr<ThreadPool> dispatcher_;  // one worker: runs experts in Run order
};

}  // namespace sy::offload
