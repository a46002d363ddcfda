// Backend: the one interface every compute device implements (cpu, sim, cuda).
//
// Memory. Allocate() returns device tensors from the backend's caching allocator; memory returns to
// the cache when the last Tensor view of it is destroyed. AllocateHost() returns page-locked host
// memory for fast asynchronous copies. Running out of device memory is a ResourceExhausted Status,
// never an abort.
//
// Ordering. Every operator below is enqueued on the backend's compute stream, in call order. On
// cuda that is asynchronous; on cpu and sim the operator runs to completion on the calling thread
// before returning (the compute stream *is* the calling thread). Copies take an explicit stream:
// on sim and cuda a copy on a non-compute stream overlaps with compute. Order across streams with
// events: RecordEvent(e, copy_stream); StreamWaitEvent(compute_stream(), e). Read results on the
// host only after copying them to host memory and synchronizing the stream of that copy.
//
// Tensors. Arguments are views (runtime/core/tensor.h). Outputs are preallocated by the caller
// with the documented shape and are overwritten, except where an operator says it accumulates.
// With beta == 0 a GEMM output is not read (the BLAS rule), so it may hold garbage or NaN.
// All tensors must be contiguous and on this backend's device (checked). Index tensors are i32.
//
// Note [16-bit operands]. Every floating-point operand (weights and activations alike) may be f32,
// bf16 or f16, each independently, unless an operator says otherwise (the operands marked "f32"
// below: the statistics lse and rstd, TopK's values, CrossEntropy's losses, ScatterAddRows'
// weights, and the weight gradients of GroupedGemmWeightGrad and RmsNormBackward). Operators
// compute in f32: a 16-bit input is read as its exact f32 value, every sum accumulates in f32, and
// each output is rounded once to its dtype (nearest even). So a model keeps its activations in
// bf16 (mixed-precision training: ModelOptions::compute_dtype in runtime/model/moe_model.h) or runs
// on bf16 weights without expanding them.
// The GEMMs multiply the operands' exact values (a product of two 16-bit values is exact in f32)
// and accumulate in f32; a backend may use 16-bit dot-product hardware for two 16-bit operands of
// one dtype (the CPU's AVX512-BF16, tensor cores), which changes only the order of the f32 sums
// (and, as that hardware does, may flush subnormal inputs and sums to zero).
//
// Thread-safety: memory, stream and event calls are thread-safe. Operators may be called from one
// thread at a time per backend (the thread that owns the compute stream); copy streams may be
// driven from other threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy {

class Workspace;

// A queue of work on a device. Owned by whoever created it; must outlive the work queued on it.
class Stream {
 public:
  virtual ~Stream() = default;
};

// A point in a stream's work. Owned by whoever created it.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks the host until the work before the event's last RecordEvent has finished.
  virtual void Synchronize() = 0;
  // True when that work has finished (or the event was never recorded).
  virtual bool Query() = 0;
};

// What a backend can do, as ggml's device caps.
struct BackendCaps {
  bool async_copies = false;     // copies on another stream overlap with compute
  bool pinned_host = false;      // AllocateHost returns page-locked memory
  bool host_accessible = false;  // host code may dereference device memory directly
  // The GEMM operators take quantized weights (q8_0, q4_0, the k-quants; runtime/core/dtype.h).
  bool quantized_weights = false;
  // Every operator takes 16-bit activations (Note [16-bit operands]): cpu, sim and cuda (whose
  // 16-bit paths were compiled without a GPU in session 25 and await validate.sh's op-checks).
  bool sixteen_bit_activations = false;
};

struct MemoryStats {
  size_t bytes_in_use = 0;       // handed out and not yet returned
  size_t peak_bytes_in_use = 0;  // since creation or ResetPeak()
  size_t bytes_reserved = 0;     // held from the device: in use plus cached
  size_t limit = 0;              // device capacity or the sim budget; 0 = unknown
  size_t num_allocs = 0;         // Allocate calls served
  size_t num_device_allocs = 0;  // of those, served by a fresh device allocation (cache misses)
  // AllocateReleasable memory that holds physical memory now (cuda; outside the counts above).
  size_t releasable_bytes_mapped = 0;
  // Device memory a new allocation could still get: free on the device plus what the cache holds
  // unused (cuda: cudaMemGetInfo). 0 = unknown (cpu and sim, whose memory is the host's:
  // runtime/core/host_memory.h).
  size_t available = 0;
};

struct GemmOptions {
  bool trans_a = false;
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
};

enum class ReduceOp : uint8_t { kSum, kMean, kMax, kSumSquares };
enum class ReduceAxis : uint8_t {
  kLast,   // x viewed as [R, N] (N = last dim): out [R]
  kFirst,  // x viewed as [R, N] (R = first dim): out [N]
};

// Rotary embedding, rotate-half convention (Hugging Face Llama/Mixtral/Qwen). With a rotary_dim R
// below the head dim D (partial rotary: GLM-4.5's partial_rotary_factor), the first R values of
// each head rotate as a head of R would, pairs (i, i + R/2) by position * theta^(-2i/R), and the
// other D - R pass through.
struct RopeOptions {
  float theta = 10000.0f;  // Default: 10000
  int64_t rotary_dim = 0;  // Default: 0 = the whole head. Must be even and <= D
  int64_t RotaryDim(int64_t head_dim) const { return rotary_dim > 0 ? rotary_dim : head_dim; }
};

struct AttentionOptions {
  float scale = 1.0f;  // usually 1/sqrt(head_dim)
  // Valid key/value length per batch entry (empty: all S). Query t of batch b sits at position
  // kv_lens[b] - T + t and attends keys 0..that position (causal). Must satisfy T <= kv_lens[b].
  std::vector<int32_t> kv_lens;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual BackendCaps caps() const = 0;
  virtual std::string name() const = 0;  // "cpu", "sim", "cuda:0 (NVIDIA H100 ...)"

  // ---- memory ----
  // An uninitialised contiguous tensor in device memory, from the caching allocator, or, while a
  // Workspace is bound to this backend on the calling thread (runtime/backend/workspace.h),
  // carved from that workspace: step-lifetime memory, no allocator call.
  Result<Tensor> Allocate(DType dtype, Shape shape);
  // A contiguous tensor in host memory (page-locked where caps().pinned_host); from a bound
  // workspace's host arena likewise.
  Result<Tensor> AllocateHost(DType dtype, Shape shape);
  // As Allocate and AllocateHost, but always from the allocator, bound workspace or not: for
  // memory that outlives the step it is allocated in (a staging buffer grown on first use).
  Result<Tensor> AllocatePersistent(DType dtype, Shape shape) {
    return AllocateDevice(dtype, shape);
  }
  Result<Tensor> AllocatePersistentHost(DType dtype, Shape shape);
  // AllocateHost calls that reached the host allocator (not a workspace), since creation.
  uint64_t host_allocations() const { return host_allocations_.load(std::memory_order_relaxed); }
  // The workspace bound on the calling thread, or null.
  Workspace* bound_workspace() const;
  virtual MemoryStats memory_stats() const = 0;
  virtual void ResetPeakMemory() = 0;
  // Returns cached, unused device memory to the device.
  virtual void EmptyCache() = 0;

  // ---- memory whose backing can be dropped (ZeRO-3's full copies: parallel/zero3.h) ----
  // An uninitialised contiguous tensor whose physical memory ReleaseBacking can drop and
  // RestoreBacking bring back at the same address, so the views that layers keep of it stay
  // valid. Never from a workspace. cpu and sim: Allocate (whole pages of host memory); cuda: CUDA
  // virtual memory (cuMemAddressReserve + cuMemCreate/cuMemMap), in 2 MiB granules.
  virtual Result<Tensor> AllocateReleasable(DType dtype, Shape shape) = 0;
  // Whether ReleaseBacking and RestoreBacking take `buffer` (cpu and sim: any whole pages of
  // host memory; cuda: a buffer of AllocateReleasable).
  virtual bool IsReleasable(const Buffer& buffer) const = 0;
  // Drops the physical memory behind `buffer` (IsReleasable, checked); its contents are lost.
  // Nothing queued may still read or write it: synchronise first.
  virtual void ReleaseBacking(const Buffer& buffer) = 0;
  // Gives `buffer` physical memory again, contents undefined (zeros on cpu and sim).
  // ResourceExhausted when the device has none left.
  virtual Status RestoreBacking(const Buffer& buffer) = 0;

  // ---- streams and events ----
  virtual Stream& compute_stream() = 0;
  virtual std::unique_ptr<Stream> CreateStream() = 0;
  virtual std::unique_ptr<Event> CreateEvent() = 0;
  virtual void RecordEvent(Event& event, Stream& stream) = 0;
  // Work queued on `stream` after this call starts only once `event` has completed.
  virtual void StreamWaitEvent(Stream& stream, Event& event) = 0;
  virtual void SynchronizeStream(Stream& stream) = 0;
  // Waits for every stream of this backend.
  virtual void Synchronize() = 0;
  // Accounts `flops` of work on the compute stream in a device whose compute time is modelled
  // (sim with SimOptions::compute_gflops > 0: the calling thread sleeps flops / rate, on top of
  // the real operators it ran); nothing elsewhere.
  virtual void ModelCompute(double flops) { (void)flops; }

  // ---- copies ----
  // Copies src into dst (same dtype and numel). Either side may be host memory or this backend's
  // device memory; the direction follows from their devices.
  virtual void CopyAsync(const Tensor& src, const Tensor& dst, Stream& stream) = 0;

  // ---- operators (compute stream) ----
  // out (f32, bf16, f16 or i32) = value, rounded to out's dtype.
  virtual void Fill(const Tensor& out, float value) = 0;
  // Floating-point dtype conversion, round to nearest even (runtime/core/dtype.h).
  virtual void Convert(const Tensor& src, const Tensor& out) = 0;

  // c[M,N] = alpha * op(a) * op(b) + beta * c.  a [M,K] ([K,M] if trans_a), b [K,N] ([N,K] if
  // trans_b, the layout of a PyTorch Linear weight), c [M,N]: each f32, bf16 or f16.
  // Where caps().quantized_weights, b (here and in BatchedGemm and the GroupedGemms) may also be
  // q8_0, q4_0 or a k-quant, always [N,K] with trans_b and rows of whole blocks: the dequantized
  // weight's product (small a's rows are rounded to 8 bits: runtime/core/quant_blocks.h).
  virtual void Gemm(const Tensor& a, const Tensor& b, const Tensor& c, GemmOptions options) = 0;
  // The same for each i of a leading batch dimension: a [Bt,M,K], b [Bt,K,N], c [Bt,M,N].
  virtual void BatchedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                           GemmOptions options) = 0;
  // Grouped GEMM with per-group row counts (MoE experts): the rows of a [R,K] and c [R,N] are split
  // into consecutive groups of group_rows[g] rows (sum = R; a group may be empty), and group g
  // computes c_g = alpha * a_g * op(b[g]) + beta * c_g with b [G,K,N] ([G,N,K] if trans_b),
  // f32/bf16/f16. trans_a must be false.
  virtual void GroupedGemm(const Tensor& a, const Tensor& b, const Tensor& c,
                           std::span<const int64_t> group_rows, GemmOptions options) = 0;
  // GroupedGemm of one `a` with several weights of one shape and dtype (an expert layer's gate
  // and up projections): cs[i] = GroupedGemm(a, bs[i]). A backend may run them as one launch or
  // parallel region. Default: one GroupedGemm per weight.
  virtual void GroupedGemmShared(const Tensor& a, std::span<const Tensor> bs,
                                 std::span<const Tensor> cs, std::span<const int64_t> group_rows,
                                 GemmOptions options) {
    for (size_t i = 0; i < bs.size() && i < cs.size(); ++i) {
      GroupedGemm(a, bs[i], cs[i], group_rows, options);
    }
  }
  // The weight gradient of GroupedGemm with trans_b: dw[g] = beta * dw[g] + dy_g^T * x_g, with
  // x [R,K], dy [R,N] (each f32, bf16 or f16), dw f32 [G,N,K]. Empty groups give beta * dw[g].
  virtual void GroupedGemmWeightGrad(const Tensor& x, const Tensor& dy, const Tensor& dw,
                                     std::span<const int64_t> group_rows, float beta) = 0;

  // Elementwise, same shapes.
  virtual void Add(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void Mul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void Scale(const Tensor& x, float alpha, const Tensor& out) = 0;
  // y += alpha * x (accumulates into y).
  virtual void Axpy(float alpha, const Tensor& x, const Tensor& y) = 0;
  // out[r, :] = x[r, :] + bias, with x viewed as [R, N] and bias [N].
  virtual void AddBias(const Tensor& x, const Tensor& bias, const Tensor& out) = 0;
  virtual void Silu(const Tensor& x, const Tensor& out) = 0;
  virtual void SiluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) = 0;
  // Exact (erf) GELU, PyTorch's default.
  virtual void Gelu(const Tensor& x, const Tensor& out) = 0;
  virtual void GeluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) = 0;
  // out = max(x, 0) (a NaN stays NaN); the backward passes dout where x > 0 and 0 elsewhere.
  virtual void Relu(const Tensor& x, const Tensor& out) = 0;
  virtual void ReluBackward(const Tensor& x, const Tensor& dout, const Tensor& dx) = 0;
  // out = silu(gate) * up.
  virtual void Swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  virtual void SwigluBackward(const Tensor& gate, const Tensor& up, const Tensor& dout,
                              const Tensor& dgate, const Tensor& dup) = 0;

  // Reductions over one axis of x viewed as a matrix (see ReduceAxis). kMax only with kLast.
  virtual void Reduce(const Tensor& x, const Tensor& out, ReduceOp op, ReduceAxis axis) = 0;

  // Softmax over the last dimension, and its backward from the output y.
  virtual void Softmax(const Tensor& x, const Tensor& out) = 0;
  virtual void SoftmaxBackward(const Tensor& y, const Tensor& dy, const Tensor& dx) = 0;
  // The k largest of each row of x [R,N], in descending order; equal values keep the lower
  // index first. values f32 [R,k], indices i32 [R,k].
  virtual void TopK(const Tensor& x, int k, const Tensor& values, const Tensor& indices) = 0;

  // out = x / sqrt(mean(x^2) + eps) * weight over the last dim. x [R,N], weight [N]
  // (f32/bf16/f16). rstd f32 [R] receives 1/sqrt(mean(x^2)+eps) for the backward, or may be an
  // undefined Tensor.
  virtual void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
                       const Tensor& rstd) = 0;
  // dweight f32 [N] is overwritten with the sum over rows, or may be undefined (not computed).
  virtual void RmsNormBackward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                               const Tensor& dout, const Tensor& dx, const Tensor& dweight) = 0;

  // Rotary embedding (see RopeOptions): x [T,H,D] (rank 3), positions i32 [T]; with the whole
  // head rotating (D even), pair (i, i+D/2) rotates by positions[t] * theta^(-2i/D).
  virtual void Rope(const Tensor& x, const Tensor& positions, const RopeOptions& rope,
                    const Tensor& out) = 0;
  virtual void RopeBackward(const Tensor& dout, const Tensor& positions, const RopeOptions& rope,
                            const Tensor& dx) = 0;

  // Causal attention with grouped-query heads (Hq a multiple of Hkv; query head h reads kv head
  // h / (Hq/Hkv)). q [B,T,Hq,D], k and v [B,S,Hkv,D] (a KV cache may have S > kv_lens[b]),
  // out [B,T,Hq,D]. lse f32 [B,Hq,T] receives each row's log-sum-exp of the scaled scores for the
  // backward, or may be undefined. Prefill: T = S. Decode: T = 1 over a cache.
  virtual void Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const AttentionOptions& options) = 0;
  virtual void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& lse, const Tensor& dout,
                                 const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                 const AttentionOptions& options) = 0;

  // out[n] = table[ids[n]]: table [V,H], ids i32 [N] in [0,V), out [N,H].
  virtual void EmbeddingGather(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
  // dtable[ids[n]] += dout[n] (accumulates; repeated ids add up). dtable [V,H].
  virtual void EmbeddingScatterAdd(const Tensor& dout, const Tensor& ids, const Tensor& dtable) = 0;

  // Per-row cross-entropy: losses[n] = lse(logits[n]) - logits[n, targets[n]]; a target of -1 is
  // ignored (loss 0, gradient 0). logits [N,V], targets i32 [N], losses f32 [N], lse f32 [N] or
  // undefined.
  virtual void CrossEntropy(const Tensor& logits, const Tensor& targets, const Tensor& losses,
                            const Tensor& lse) = 0;
  // dlogits[n] = dlosses[n] * (softmax(logits[n]) - onehot(targets[n])).
  virtual void CrossEntropyBackward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                    const Tensor& dlosses, const Tensor& dlogits) = 0;

  // Token permutation for MoE dispatch: out[m] = src[indices[m]], src [N,H], out [M,H], any dtype
  // (the same for both).
  virtual void GatherRows(const Tensor& src, const Tensor& indices, const Tensor& out) = 0;
  // Un-permutation and combine: out[indices[m]] += weights[m] * src[m] (accumulates), src [M,H],
  // out [N,H]; weights f32 [M] or undefined (all 1).
  virtual void ScatterAddRows(const Tensor& src, const Tensor& indices, const Tensor& weights,
                              const Tensor& out) = 0;

 protected:
  // The allocators behind Allocate and AllocateHost, which a workspace bypasses.
  virtual Result<Tensor> AllocateDevice(DType dtype, Shape shape) = 0;
  virtual Result<Tensor> AllocatePinnedHost(DType dtype, Shape shape) = 0;

 private:
  friend class Workspace;
  friend class WorkspaceBinding;
  // The bound workspace and the thread it is bound for (set before the pointer is published).
  std::atomic<Workspace*> workspace_{nullptr};
  std::atomic<std::thread::id> workspace_thread_{};
  std::atomic<uint64_t> host_allocations_{0};
};

struct SimOptions {
  size_t memory_bytes = size_t{8} << 30;  // Default: 8 GiB device memory budget
  double link_gbps = 25.0;                // Default: 25 GB/s each way, a PCIe 4.0 x16 link
  double link_latency_us = 10.0;          // Default: 10 us per copy
  // Default: 0 = not modelled. The modelled compute rate (GFLOP/s) of Backend::ModelCompute: the
  // caller sleeps for the work it declares, so ranks oversubscribed on few cores show the time a
  // device would take rather than their contention for the cores.
  double compute_gflops = 0;
};

struct BackendOptions {
  int num_threads = 0;  // Default: 0 = SY_NUM_THREADS, or the number of cores
  SimOptions sim;
};

// Creates the backend for `device`. Unavailable when the device is not built in or not present.
Result<std::unique_ptr<Backend>> CreateBackend(Device device, const BackendOptions& options = {});

// The devices this build can use on this machine: cpu, sim, and each cuda:N present.
std::vector<Device> AvailableDevices();

// Whether this build has the CUDA backend compiled in (a GPU may still be absent).
bool CudaBackendCompiled();

}  // namespace sy
