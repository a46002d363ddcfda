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

template <typename T>
__global__ void GatherKernel(const T* src, int64_t src_rows, const int32_t* indices, int64_t rows,
                             int64_t cols, float* out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t index = indices[r];
    float* out_row = out + r * cols;
    if (index < 0 || index >= src_rows) {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out_row[c] = NAN;
      continue;
    }
    const T* src_row = src + index * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out_row[c] = ToF32(src_row[c]);
  }
}

// Scatter of at most kScatterScanRows rows: block per output row; the block reads every index
// and adds the rows that name its own, in source order.
__global__ void ScatterAddScanKernel(const float* src, const int32_t* indices, const float* weights,
                                     int64_t rows, int64_t cols, float* out, int64_t out_rows) {
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
      float* out_row = out + o * cols;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float sum = out_row[c];
        for (int64_t r = 0; r < rows; ++r) {
          if (index[r] == o) sum += (weights != nullptr ? weights[r] : 1.0f) * src[r * cols + c];
        }
        out_row[c] = sum;
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
__global__ void ScatterAddSortedKernel(const float* src, const uint32_t* keys,
                                       const int32_t* source, const float* weights, int64_t rows,
                                       int64_t cols, float* out, int64_t out_rows) {
  for (int64_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const uint32_t key = keys[i];
    if (key >= out_rows || (i > 0 && keys[i - 1] == key)) continue;
    float* out_row = out + static_cast<int64_t>(key) * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float sum = out_row[c];
      for (int64_t j = i; j < rows && keys[j] == key; ++j) {
        const int64_t r = source[j];
        sum += (weights != nullptr ? weights[r] : 1.0f) * src[r * cols + c];
      }
      out_row[c] = sum;
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

void ScatterAdd(const float* src, const int32_t* indices, const float* weights, int64_t rows,
                int64_t cols, float* out, int64_t out_rows, void* workspace, size_t workspace_bytes,
                cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || out_rows <= 0) return;
  const int threads = RowThreads(cols, 256);
  if (rows <= kScatterScanRows) {
    ScatterAddScanKernel<<<RowBlocks(out_rows), threads, 0, stream>>>(src, indices, weights, rows,
                                                                      cols, out, out_rows);
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
  ScatterAddSortedKernel<<<RowBlocks(rows), threads, 0, stream>>>(
      src, s.keys_out, s.source_out, weights, rows, cols, out, out_rows);
  SY_CUDA_CHECK_LAUNCH();
}

template <typename T>
void Gather(const T* src, int64_t src_rows, const int32_t* indices, int64_t rows, int64_t cols,
            float* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  GatherKernel<T><<<RowBlocks(rows), RowThreads(cols, 256), 0, stream>>>(src, src_rows, indices,
                                                                         rows, cols, out);
  SY_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t ScatterAddWorkspaceBytes(int64_t m, int64_t n) {
  if (m <= kScatterScanRows || n <= 0) return 0;
  return 4 * Aligned(static_cast<size_t>(m) * 4) + Aligned(SortTempBytes(m, n));
}

void LaunchEmbeddingGather(const void* table, FloatType table_type, int64_t vocab,
                           const int32_t* ids, int64_t n, int64_t cols, float* out,
                           cudaStream_t stream) {
  DispatchFloat(table_type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    Gather(static_cast<const T*>(table), vocab, ids, n, cols, out, stream);
  });
}

void LaunchEmbeddingScatterAdd(const float* dout, const int32_t* ids, int64_t n, int64_t cols,
                               float* dtable, int64_t vocab, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  ScatterAdd(dout, ids, nullptr, n, cols, dtable, vocab, workspace, workspace_bytes, stream);
}

void LaunchGatherRows(const float* src, int64_t n, const int32_t* indices, int64_t m, int64_t cols,
                      float* out, cudaStream_t stream) {
  Gather(src, n, indices, m, cols, out, stream);
}

void LaunchScatterAddRows(const float* src, const int32_t* indices, const float* weights, int64_t m,
                          int64_t cols, float* out, int64_t n, void* workspace,
                          size_t workspace_bytes, cudaStream_t stream) {
  ScatterAdd(src, indices, weights, m, cols, out, n, workspace, workspace_bytes, stream);
}

}  // namespace sy::cuda
