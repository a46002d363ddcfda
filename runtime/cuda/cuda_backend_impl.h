// CudaBackend: one NVIDIA GPU as a Backend (runtime/backend/backend.h): cuBLAS for the GEMMs, our
// own kernels (runtime/cuda/*.cu) for every other operator.
//
// Memory: device tensors come from a CachingAllocator over cudaMalloc/cudaFree whose limit is the
// device's total memory; AllocateHost returns pinned memory (cudaHostAlloc), as Buffers on
// Device::Cpu() with pinned() true.
// Streams: the compute stream and every CreateStream stream are non-blocking streams of this
// device; events are created without timing. Operators enqueue on the compute stream and return
// without synchronizing; the host learns about asynchronous faults at the next synchronizing call
// (SY_CUDA_CHECK aborts there).
// Scratch: temporaries an operator needs (converted GEMM activations, reduction workspaces) come
// from the caching allocator and are handed back only after an event recorded behind the work
// that uses them has completed, so a block still read by the compute stream is never given to a
// caller who might write it from another stream.
//
// Ownership: owns its allocator, streams, cuBLAS handle and workspace; tensors, streams and events
// it returns must not outlive it. Every entry point makes its device current for the call and
// restores the caller's device after.
// Thread-safety: as Backend. Memory, stream, event and copy calls are thread-safe; operators come
// from one thread at a time (the owner of the compute stream).
//
// Private to runtime/cuda: includes the CUDA headers. Others reach it through
// runtime/cuda/cuda_backend.h (CreateCudaBackend).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/caching_allocator.h"
#include "runtime/core/mutex.h"
#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/cuda_releasable_memory.h"

namespace sy {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;                // "NVIDIA H100 80GB HBM3"
  size_t total_memory = 0;         // bytes
  size_t shared_memory_optin = 0;  // the most dynamic shared memory one block may opt into
  int compute_major = 0;
  int compute_minor = 0;
};

class CudaBackend final : public Backend {
 public:
  // `cublas`: the loaded library (LoadCublas), which outlives the backend.
  CudaBackend(const CudaDeviceInfo& info, const CublasLibrary& cublas);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::Cuda(info_.index); }
  BackendCaps caps() const override;
  std::string name() const override;

  MemoryStats memory_stats() const override;
  void ResetPeakMemory() override;
  void EmptyCache() override;
  // CUDA virtual memory (runtime/cuda/cuda_releasable_memory.h), set up on first use.
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

  // runtime/cuda/cuda_ops.cc
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
  void Reduce(const Tensor& x, const Tensor& out, ReduceOp op, ReduceAxis axis) override;
  void Softmax(const Tensor& x, const Tensor& out) override;
  void SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
  void TopK(const Tensor& x, int k, const Tensor& values, const Tensor& indices) override;
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
               const Tensor& rstd) override;
  void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                       const Tensor& dout, const Tensor& dx, const Tensor& dweight) override;
  void Rope(const Tensor& x, const Tensor& positions, const RopeOptions& rope,
            const Tensor& out) override;
  void RopeBackward(const Tensor& dout, const Tensor& positions, const RopeOptions& rope,
                    const Tensor& dx) override;
  void Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, const AttentionOptions& options) override;
  void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const Tensor& dout, const Tensor& dq, const Tensor& dk,
                         const Tensor& dv, const AttentionOptions& options) override;
  void EmbeddingGather(const Tensor& table, const Tensor& ids, const Tensor& out) override;
  void EmbeddingScatterAdd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) override;
  void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                    const Tensor& lse) override;
  void CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dlosses, const Tensor& dlogits) override;
  void GatherRows(const Tensor& src, const Tensor& indices, const Tensor& out) override;
  void ScatterAddRows(const Tensor& src, const Tensor& indices, const Tensor& weights,
                      const Tensor& out) override;

  // runtime/cuda/cuda_gemm.cc
  void Gemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) override;
  void BatchedGemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) override;
  void GroupedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                   std::span<const int64_t> group_rows, GemmOptions options) override;
  void GroupedGemmWeightGrad(const Tensor& x, const Tensor& dy, const Tensor& dw,
                             std::span<const int64_t> group_rows, float beta) override;

 private:
  friend void* CudaComputeStream(Backend& backend);
  Result<Tensor> AllocateDevice(DType dtype, Shape shape) override;
  Result<Tensor> AllocatePinnedHost(DType dtype, Shape shape) override;
  // Temporary device memory for one operator call; see "Scratch" above. Open one per operator,
  // take blocks with Get, enqueue the work; the destructor records the retiring event.
  class Scratch {
   public:
    explicit Scratch(CudaBackend& backend) : backend_(backend) {}
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

    // `count` elements of T; aborts when the device is out of memory.
    template <typename T>
    T* Get(int64_t count) {
      return static_cast<T*>(GetBytes(static_cast<size_t>(count) * sizeof(T)));
    }
    void* GetBytes(size_t bytes);

   private:
    CudaBackend& backend_;
    std::vector<std::shared_ptr<Buffer>> buffers_;
  };

  struct Retired {
    std::unique_ptr<CudaEvent> event;
    std::vector<std::shared_ptr<Buffer>> buffers;
  };

  cudaStream_t stream() const { return compute_->get(); }
  cudaStream_t NativeStream(Stream& stream) const;
  CudaEvent& NativeEvent(Event& event) const;
  // Aborts unless `t` is defined, contiguous and on this device; `what` names the operator.
  void CheckOperand(const Tensor& t, const char* what) const;

  // Hands `buffers` back once the compute stream has passed this point.
  void Retire(std::vector<std::shared_ptr<Buffer>> buffers) SY_EXCLUDES(retired_mutex_);
  // Releases retired buffers whose event has completed (all of them after a synchronize).
  void ReclaimRetired() SY_EXCLUDES(retired_mutex_);

  // One row-major GEMM (or a strided batch of them) for cuBLAS: c = alpha * op(a) * op(b) +
  // beta * c, where a and b share `dtype` and c has `c_dtype` (f32, or a's 16-bit dtype).
  // Strides and leading dimensions are in elements.
  struct GemmCall {
    const void* a = nullptr;
    const void* b = nullptr;
    void* c = nullptr;
    DType dtype = DType::kF32;
    DType c_dtype = DType::kF32;
    int64_t m = 0;
    int64_t n = 0;
    int64_t k = 0;
    bool trans_a = false;
    bool trans_b = false;
    float alpha = 1.0f;
    float beta = 0.0f;
    int64_t lda = 0;  // 0: tight (k, or m when trans_a)
    int64_t batch = 1;
    int64_t stride_a = 0;
    int64_t stride_b = 0;
    int64_t stride_c = 0;
  };
  void RunGemm(const GemmCall& call);
  // `call` with f32 a and bf16 b, where a has already been split into `pieces` (see
  // Note [mixed-precision GEMM] in cuda_gemm.cc); call.a is ignored. `stacked`, when not null,
  // holds 3 * batch * m * n floats and lets one GEMM read b once for all three terms.
  void RunSplitGemm(const GemmCall& call, const void* pieces, float* stacked);
  // Gemm and BatchedGemm of operands of any float dtypes (Note [16-bit GEMM operands] in
  // cuda_gemm.cc): `call` holds the shapes, strides, options and the tensors' data; a, b and c
  // are the checked operands (a's stored rows are split or widened whole).
  void RunAnyGemm(GemmCall call, const Tensor& a, const Tensor& b, const Tensor& c,
                  Scratch& scratch);

  CudaDeviceInfo info_;
  std::unique_ptr<CachingAllocator> allocator_;  // declared first: destroyed last
  mutable Mutex releasable_mutex_;
  std::unique_ptr<CudaReleasableMemory> releasable_ SY_GUARDED_BY(releasable_mutex_);
  std::unique_ptr<CudaStream> compute_;
  std::unique_ptr<CudaDeviceMemory> cublas_workspace_;
  std::unique_ptr<CublasHandle> cublas_;

  Mutex retired_mutex_;
  std::deque<Retired> retired_ SY_GUARDED_BY(retired_mutex_);
  std::vector<std::unique_ptr<CudaEvent>> free_events_ SY_GUARDED_BY(retired_mutex_);
};

}  // namespace sy
