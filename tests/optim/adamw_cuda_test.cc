// The fused CUDA AdamW/Adam kernel against the CPU reference, bit for bit (both spell out the same
// correctly rounded float32 operations), including the bf16/f16 compute copy. Skips, saying so,
// where no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "optim/cuda/adamw_cuda.h"
#include "optim/optimizer_options.h"
#include "optim/update_kernels.h"
#include "runtime/core/dtype.h"

namespace sy {
namespace {

bool HaveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  void* ptr = nullptr;
  EXPECT_EQ(cudaMalloc(&ptr, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(ptr);
}

template <typename T>
std::vector<T> ToHost(const T* device, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

std::vector<float> RandomVector(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(AdamwCudaTest, MatchesCpuReferenceBitForBit) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device: the fused AdamW kernel was not run";
  const size_t n = 1000003;  // not a multiple of the block size
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam}) {
    for (DType copy_dtype : {DType::kBF16, DType::kF16}) {
      OptimizerOptions o;
      o.kind = kind;
      o.weight_decay = 0.1;
      std::vector<float> p = RandomVector(n, 1.0f, 1), m(n, 0.0f), v(n, 0.0f);
      float* dp = ToDevice(p);
      float* dm = ToDevice(m);
      float* dv = ToDevice(v);
      uint16_t* dcopy = ToDevice(std::vector<uint16_t>(n, 0));
      for (int64_t step = 1; step <= 3; ++step) {
        std::vector<float> g = RandomVector(n, 0.01f, 100 + step);
        float* dg = ToDevice(g);
        AdamStepScalars s = MakeAdamStepScalars(o, 1e-3, step);
        LaunchAdamUpdateCuda(s, dp, dg, dm, dv, n, dcopy, copy_dtype, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        AdamUpdateReference(s, p.data(), g.data(), m.data(), v.data(), n);
        cudaFree(dg);
      }
      std::vector<float> gp = ToHost(dp, n), gm = ToHost(dm, n), gv = ToHost(dv, n);
      std::vector<uint16_t> gcopy = ToHost(dcopy, n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(gp[i], p[i]) << OptimizerKindName(kind) << " param " << i;
        ASSERT_EQ(gm[i], m[i]) << "m " << i;
        ASSERT_EQ(gv[i], v[i]) << "v " << i;
        uint16_t want = copy_dtype == DType::kBF16 ? F32ToBF16(p[i]).bits : F32ToF16(p[i]).bits;
        ASSERT_EQ(gcopy[i], want) << DTypeName(copy_dtype) << " copy " << i;
      }
      cudaFree(dp);
      cudaFree(dm);
      cudaFree(dv);
      cudaFree(dcopy);
    }
  }
}

}  // namespace
}  // namespace sy
