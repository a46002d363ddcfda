// The gradient-clipping kernels of optim/cuda/grad_norm_cuda.h against the CPU: the squared norm
// from the per-block partials against a double sum on the host, and the in-place scale bit for
// bit against the float product ScaleGrads computes. Skips, saying so, where no CUDA device is
// present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "optim/cuda/grad_norm_cuda.h"
#include "optim/grad_clip.h"

namespace sy {
namespace {

bool HaveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::vector<float> RandomVector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(GradNormCudaTest, SquaredNormPartialsSumToTheHostNorm) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device: the gradient-norm kernel was not run";
  // Sizes below, at and far above one grid's worth of threads, and an empty buffer.
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{65536}, size_t{3'000'001}}) {
    SCOPED_TRACE(n);
    const std::vector<float> x = RandomVector(n, 7 + n);
    float* dx = nullptr;
    double* dpartials = nullptr;
    ASSERT_EQ(cudaMalloc(&dx, (n + 1) * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dpartials, kSquaredNormPartials * sizeof(double)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    // Poison the partials: every one must be written.
    ASSERT_EQ(cudaMemset(dpartials, 0xff, kSquaredNormPartials * sizeof(double)), cudaSuccess);
    LaunchSquaredNormPartialsCuda(dx, n, dpartials, nullptr);
    std::vector<double> partials(kSquaredNormPartials);
    ASSERT_EQ(cudaMemcpy(partials.data(), dpartials, partials.size() * sizeof(double),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    double device_sum = 0.0;
    for (double p : partials) device_sum += p;
    double host_sum = 0.0;
    for (float v : x) host_sum += static_cast<double>(v) * v;
    EXPECT_NEAR(device_sum, host_sum, 1e-12 * host_sum) << "squared norm";
    cudaFree(dx);
    cudaFree(dpartials);
  }
}

TEST(GradNormCudaTest, ScaleInPlaceMatchesScaleGradsBitForBit) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device: the scale kernel was not run";
  const size_t n = 1'000'003;
  std::vector<float> x = RandomVector(n, 11);
  float* dx = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  const float factor = 0.3719f;
  LaunchScaleInPlaceCuda(dx, n, factor, nullptr);
  std::vector<float> device(n);
  ASSERT_EQ(cudaMemcpy(device.data(), dx, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<std::span<float>> grads = {std::span<float>(x)};
  ScaleGrads(grads, factor, nullptr);
  EXPECT_EQ(std::memcmp(device.data(), x.data(), n * sizeof(float)), 0);
  cudaFree(dx);
}

}  // namespace
}  // namespace sy
