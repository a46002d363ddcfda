// CpuBackend: the host as a compute device. OpenBLAS for f32 GEMM, our own vectorised kernels for
// the rest (bf16/f16 weights are converted tile by tile, never expanded whole), run on a thread
// pool. Streams are synchronous: every operator and copy completes before it returns, and events
// are always complete.
//
// The SimBackend (runtime/sim) derives from this class: it reuses every operator and replaces
// memory, streams and copies. Operators therefore check tensors against device(), not against
// DeviceType::kCpu.
//
// Ownership: owns its thread pool and allocator; tensors it returns must not outlive it.
// Thread-safety: as Backend (runtime/backend/backend.h).
#pragma once

#include <memory>
#include <string>

#include "runtime/backend/backend.h"
#include "runtime/backend/caching_allocator.h"
#include "runtime/core/thread_pool.h"

namespace sy {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options = {});
  ~CpuBackend() override;

  Device device() const override { return Device::Cpu(); }
  BackendCaps caps() const override;
  std::string name() const override;

  MemoryStats memory_stats() const override;
  void ResetPeakMemory() override;
  void EmptyCache() override;
  // Releasable memory is any tensor's (sim's too): every allocation owns whole pages of host
  // memory. ReleaseBacking drops them with madvise(MADV_DONTNEED); the next write commits fresh
  // zero pages, so RestoreBacking has nothing to do.
  Result<Tensor> AllocateReleasable(DType dtype, Shape shape) override;
  bool IsReleasable(const Buffer& buffer) const override;
  void ReleaseBacking(const Buffer& buffer) override;
  Status RestoreBacking(const Buffer& buffer) override;

  Stream& compute_stream() override;
  std::unique_ptr<Stream> CreateStream() override;
  std::unique_ptr<Event> CreateEvent() override;
  void RecordEvent(Event& event, Stream& stream) override;
  void StreamWaitEvent(Stream& stream, Event& event) override;
  void SynchronizeStream(Stream& stream) override;
  void Synchronize() override;
  void CopyAsync(const Tensor& src, const Tensor& dst, Stream& stream) override;

  // runtime/cpu/cpu_elementwise.cc
  void Fill(const Tensor& out, float value) override;
  void Convert(const Tensor& src, const Tensor& out) override;
  void Add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void Mul(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void Scale(const Tensor& x, float alpha, const Tensor& out) override;
  void Axpy(float alpha, const Tensor& x, const Tensor& y) override;
  void AddBias(const Tensor& x, const Tensor& bias, const Tensor& out) override;
  void Silu(const Tensor& x, const Tensor& out) override;
  void SiluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) override;
  void Gelu(const Tensor& x, const Tensor& out) override;
  void GeluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) override;
  void Relu(const Tensor& x, const Tensor& out) override;
  void ReluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) override;
  void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout, const Tensor& dgate,
                      const Tensor& dup) override;

  // runtime/cpu/cpu_gemm.cc
  void Gemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) override;
  void BatchedGemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) override;
  void GroupedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                   std::span<const int64_t> group_rows, GemmOptions options) override;
  void GroupedGemmShared(const Tensor& a, std::span<const Tensor> bs, std::span<const Tensor> cs,
                         std::span<const int64_t> group_rows, GemmOptions options) override;
  void GroupedGemmWeightGrad(const Tensor& x, const Tensor& dy, const Tensor& dw,
                             std::span<const int64_t> group_rows, float beta) override;

  // runtime/cpu/cpu_reduce.cc
  void Reduce(const Tensor& x, const Tensor& out, ReduceOp op, ReduceAxis axis) override;
  void Softmax(const Tensor& x, const Tensor& out) override;
  void SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
  void TopK(const Tensor& x, int k, const Tensor& values, const Tensor& indices) override;
  void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                    const Tensor& lse) override;
  void CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dlosses, const Tensor& dlogits) override;

  // runtime/cpu/cpu_norm_rope.cc
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
               const Tensor& rstd) override;
  void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                       const Tensor& dout, const Tensor& dx, const Tensor& dweight) override;
  void Rope(const Tensor& x, const Tensor& positions, const RopeOptions& rope,
            const Tensor& out) override;
  void RopeBackward(const Tensor& dout, const Tensor& positions, const RopeOptions& rope,
                    const Tensor& dx) override;

  // runtime/cpu/cpu_attention.cc
  void Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, const AttentionOptions& options) override;
  void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                         const Tensor& dv, const AttentionOptions& options) override;

  // runtime/cpu/cpu_index.cc
  void EmbeddingGather(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void EmbeddingScatterAdd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) override;
  void GatherRows(const Tensor& src, const Tensor& indices, const Tensor& out) override;
  void ScatterAddRows(const Tensor& src, const Tensor& indices, const Tensor& weights,
                      const Tensor& out) override;

  ThreadPool& pool() { return *pool_; }

 protected:
  // Gemm of a bf16 a and a bf16 b into an f32 c on the bf16 dot products (cpu_gemm.cc).
  void Bf16DotGemm(const Tensor& a, const Tensor& b, const Tensor& c, const GemmOptions& options);
  Result<Tensor> AllocateDevice(DType dtype, Shape shape) override;
  Result<Tensor> AllocatePinnedHost(DType dtype, Shape shape) override;
  // Aborts unless `t` is defined, contiguous and on device(); `what` names the operator.
  void CheckOperand(const Tensor& t, const char* what) const;

  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<CachingAllocator> allocator_;

 private:
  std::unique_ptr<Stream> compute_stream_;
};

}  // namespace sy
