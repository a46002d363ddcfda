#include "runtime/cuda/index.cuh"

#include <algorithm>
#include <climits>
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "runtime/cuda/common.cuh"
#include "runtime/cuda/cuda_check.h"

namespace sy::cuda {
namespace {

// Blocks cover rows (grid-stride past the grid limit); threads cover the columns of a row, so
// every row access is coalesced.
constexpr unsigned int kMaxRowBlocks = 65535u * 16u;

unsigned int RowBlocks(int64_t rows) {
  return static_cast<unsigned int>(std::min<int64_t>(rows, kMaxRowBlocks));
}

// Templates on the source's type T and on kF32 for the output (an f32 pointer, or runtime-typed:
// common.cuh).
template <typename T, bool kF32>
__global__ void GatherKernel(const T* src, int64_t src_rows, const int32_t* indices, int64_t rows,
                             int64_t cols, Writer<kF32> out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t index = indices[r];
    const int64_t out_row = r * cols;
    if (index < 0 || index >= src_rows) {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out.Store(out_row + c, NAN);
      continue;
    }
    const T* src_row = src + index * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      out.Store(out_row + c, ToF32(src_row[c]));
    }
  }
}

// Scatter of at most kScatterScanRows rows: block per output row; the block reads every index
// and adds the rows that name its own, in source order.
// kF32: src and out as f32 pointers (the original kernel) or runtime-typed (common.cuh); the sum
// is f32 and the output row is rounded once.
template <bool kF32>
__global__ void ScatterAddScanKernel(Reader<kF32> src, const int32_t* indices, const float* weights,
                                     int64_t rows, int64_t cols, Writer<kF32> out,
                                     int64_t out_rows) {
  __shared__ int32_t index[kScatterScanRows];
  __shared__ int any;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) index[r] = indices[r];
  for (int64_t o = blockIdx.x; o < out_rows; o += gridDim.x) {
    if (threadIdx.x == 0) any = 0;
    __syncthreads();
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
      if (index[r] == o) any = 1;
    }
    __syncthreads();
    if (any) {
      const int64_t out_row = o * cols;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float sum = out.Load(out_row + c);
        for (int64_t r = 0; r < rows; ++r) {
          if (index[r] == o) sum += (weights != nullptr ? weights[r] : 1.0f) * src[r * cols + c];
        }
        out.Store(out_row + c, sum);
      }
    }
    __syncthreads();  // `any` is reset for the next row only after every thread read it
  }
}

// The sort's keys: the output row, or out_rows (after every valid one) for an index out of range,
// which the scatter skips; the values: the source rows.
__global__ void ScatterKeysKernel(const int32_t* indices, int64_t rows, int64_t out_rows,
                                  uint32_t* keys, int32_t* source) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t index = indices[r];
    keys[r] = static_cast<uint32_t>(index < 0 || index >= out_rows ? out_rows : index);
    source[r] = static_cast<int32_t>(r);
  }
}

// Block per run of equal keys (sorted, source rows ascending within a run): the block at a run's
// first position adds the run's rows into its output row, in source order.
template <bool kF32>
__global__ void ScatterAddSortedKernel(Reader<kF32> src, const uint32_t* keys,
                                       const int32_t* source, const float* weights, int64_t rows,
                                       int64_t cols, Writer<kF32> out, int64_t out_rows) {
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const uint32_t key = keys[i];
    if (key >= out_rows || (i > 0 && keys[i - 1] == key)) continue;
    const int64_t out_row = static_cast<int64_t>(key) * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float sum = out.Load(out_row + c);
      for (int64_t j = i; j < rows && keys[j] == key; ++j) {
        const int64_t r = source[j];
        sum += (weights != nullptr ? weights[r] : 1.0f) * src[r * cols + c];
      }
      out.Store(out_row + c, sum);
    }
  }
}

// The sort's pieces in the workspace: keys and values in and out, then CUB's temporary storage.
struct SortSpace {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int32_t* source_in;
  int32_t* source_out;
  void* temp;
  size_t temp_bytes;
};

constexpr size_t kAlign = 256;
size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Bits of the largest key (out_rows): the sort looks at no more.
int KeyBits(int64_t out_rows) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= out_rows) ++bits;
  return bits;
}

size_t SortTempBytes(int64_t rows, int64_t out_rows) {
  size_t bytes = 0;
  SY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), rows, 0,
      KeyBits(out_rows)));
  return bytes;
}

// The caller's workspace (ScatterAddWorkspaceBytes): CUB's storage is what follows the four
// arrays, so its size is not asked of CUB a second time.
SortSpace Carve(void* workspace, size_t workspace_bytes, int64_t rows) {
  char* at = static_cast<char*>(workspace);
  const size_t part = Aligned(static_cast<size_t>(rows) * 4);
  SY_CHECK(workspace != nullptr && workspace_bytes > 4 * part)
      << "ScatterAdd of " << rows << " rows needs a workspace of ScatterAddWorkspaceBytes, got "
      << workspace_bytes << " bytes";
  SortSpace s;
  s.keys_in = reinterpret_cast<uint32_t*>(at);
  s.keys_out = reinterpret_cast<uint32_t*>(at + part);
  s.source_in = reinterpret_cast<int32_t*>(at + 2 * part);
  s.source_out = reinterpret_cast<int32_t*>(at + 3 * part);
  s.temp = at + 4 * part;
  s.temp_bytes = workspace_bytes - 4 * part;
  return s;
}

template <bool kF32>
void ScatterAdd(Reader<kF32> src, const int32_t* indices, const float* weights, int64_t rows,
                int64_t cols, Writer<kF32> out, int64_t out_rows, void* workspace,
                size_t workspace_bytes, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || out_rows <= 0) return;
  const int threads = RowThreads(cols, 256);
  if (rows <= kScatterScanRows) {
    ScatterAddScanKernel<kF32><<<RowBlocks(out_rows), threads, 0, stream>>>(
        src, indices, weights, rows, cols, out, out_rows);
    SY_CUDA_CHECK_LAUNCH();
    return;
  }
  SY_CHECK(rows <= INT32_MAX && out_rows < INT32_MAX)
      << "ScatterAdd: " << rows << " rows into " << out_rows << " is beyond 32-bit indices";
  SortSpace s = Carve(workspace, workspace_bytes, rows);
  const unsigned int key_blocks =
      static_cast<unsigned int>(std::min<int64_t>((rows + 255) / 256, 65535));
  ScatterKeysKernel<<<key_blocks, 256, 0, stream>>>(indices, rows, out_rows, s.keys_in,
                                                    s.source_in);
  SY_CUDA_CHECK_LAUNCH();
  // Stable: the source rows stay ascending within each key.
  SY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp, s.temp_bytes, s.keys_in, s.keys_out,
                                                s.source_in, s.source_out, rows, 0,
                                                KeyBits(out_rows), stream));
  ScatterAddSortedKernel<kF32><<<RowBlocks(rows), threads, 0, stream>>>(
      src, s.keys_out, s.source_out, weights, rows, cols, out, out_rows);
  SY_CUDA_CHECK_LAUNCH();
}

// Dispatches on the source's type and on whether the output is f32.
void Gather(FloatIn src, int64_t src_rows, const int32_t* indices, int64_t rows, int64_t cols,
            FloatOut out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  DispatchFloat(src.type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    DispatchAllF32(AllF32({out.type}), [&](auto f32_tag) {
      constexpr bool k = decltype(f32_tag)::value;
      GatherKernel<T, k><<<RowBlocks(rows), RowThreads(cols, 256), 0, stream>>>(
          static_cast<const T*>(src.data), src_rows, indices, rows, cols, MakeWriter<k>(out));
      SY_CUDA_CHECK_LAUNCH();
    });
  });
}

// Dispatches on AllF32 of src and out: the f32 kernels, or the runtime-typed ones.
void ScatterAddAny(FloatIn src, const int32_t* indices, const float* weights, int64_t rows,
                   int64_t cols, FloatOut out, int64_t out_rows, void* workspace,
                   size_t workspace_bytes, cudaStream_t stream) {
  DispatchAllF32(AllF32({src.type, out.type}), [&](auto tag) {
    constexpr bool k = decltype(tag)::value;
    ScatterAdd<k>(MakeReader<k>(src), indices, weights, rows, cols, MakeWriter<k>(out), out_rows,
                  workspace, workspace_bytes, stream);
  });
}

}  // namespace

size_t ScatterAddWorkspaceBytes(int64_t m, int64_t n) {
  if (m <= kScatterScanRows || n <= 0) return 0;
  return 4 * Aligned(static_cast<size_t>(m) * 4) + Aligned(SortTempBytes(m, n));
}

void LaunchEmbeddingGather(FloatIn table, int64_t vocab, const int32_t* ids, int64_t n,
                           int64_t cols, FloatOut out, cudaStream_t stream) {
  Gather(table, vocab, ids, n, cols, out, stream);
}

void LaunchEmbeddingScatterAdd(FloatIn dout, const int32_t* ids, int64_t n, int64_t cols,
                               FloatOut dtable, int64_t vocab, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  ScatterAddAny(dout, ids, nullptr, n, cols, dtable, vocab, workspace, workspace_bytes, stream);
}

void LaunchGatherRows(FloatIn src, int64_t n, const int32_t* indices, int64_t m, int64_t cols,
                      FloatOut out, cudaStream_t stream) {
  Gather(src, n, indices, m, cols, out, stream);
}

void LaunchScatterAddRows(FloatIn src, const int32_t* indices, const float* weights, int64_t m,
                          int64_t cols, FloatOut out, int64_t n, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream) {
  ScatterAddAny(src, indices, weights, m, cols, out, n, workspace, workspace_bytes, stream);
}

}  // namespace sy::cuda
