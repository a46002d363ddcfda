// Releasable memory (Backend::AllocateReleasable / ReleaseBacking / RestoreBacking), which ZeRO-3
// uses for the dense full copies: the address stays, the contents go and come back as written;
// only AllocateReleasable's buffers qualify on cuda. The cuda cases run where there is a GPU (the
// device machine of docs/gpu-validation.md) and are skipped elsewhere.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/model/host_transfer.h"
#include "tests/runtime/backend_param_test.h"

namespace sy {
namespace {

using ReleasableMemoryTest = testing::BackendParamTest;

std::vector<float> Ramp(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

TEST_P(ReleasableMemoryTest, ReleaseAndRestoreKeepTheAddressAndTakeNewContents) {
  // Sizes below, at and above a 2 MiB granule (CUDA's) and a 4 KiB page (the cpu's).
  for (int64_t n : {int64_t{3}, int64_t{1024}, int64_t{(1 << 19) + 5}}) {
    Result<Tensor> t = backend_->AllocateReleasable(DType::kF32, Shape{n});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE(backend_->IsReleasable(*t->buffer()));
    const void* address = t->data();
    ASSERT_TRUE(CopyFromHost(*backend_, Ramp(n, 1.0f), *t).ok());
    Result<std::vector<float>> first = DownloadF32(*backend_, *t);
    ASSERT_TRUE(first.ok());
    EXPECT_EQ(*first, Ramp(n, 1.0f));

    backend_->Synchronize();
    backend_->ReleaseBacking(*t->buffer());
    ASSERT_TRUE(backend_->RestoreBacking(*t->buffer()).ok());
    EXPECT_EQ(t->data(), address) << "the address moved";
    ASSERT_TRUE(CopyFromHost(*backend_, Ramp(n, -7.0f), *t).ok());
    Result<std::vector<float>> second = DownloadF32(*backend_, *t);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(*second, Ramp(n, -7.0f)) << n << " floats";

    // Restoring memory that is there, and releasing twice, change nothing.
    ASSERT_TRUE(backend_->RestoreBacking(*t->buffer()).ok());
    backend_->Synchronize();
    backend_->ReleaseBacking(*t->buffer());
    backend_->ReleaseBacking(*t->buffer());
  }
}

TEST_P(ReleasableMemoryTest, ReleasedMemoryIsGivenBack) {
  if (backend_->device().type != DeviceType::kCuda) {
    GTEST_SKIP() << "host pages are counted against /proc by ZeRO-3's test";
  }
  const MemoryStats before = backend_->memory_stats();
  std::vector<Tensor> tensors;
  for (int i = 0; i < 8; ++i) {
    Result<Tensor> t = backend_->AllocateReleasable(DType::kF32, Shape{int64_t{1} << 20});
    ASSERT_TRUE(t.ok());
    tensors.push_back(*t);
  }
  const size_t four_mib = size_t{4} << 20;  // two 2 MiB granules each
  EXPECT_EQ(backend_->memory_stats().releasable_bytes_mapped,
            before.releasable_bytes_mapped + 8 * four_mib);
  for (int round = 0; round < 50; ++round) {
    backend_->Synchronize();
    for (const Tensor& t : tensors) backend_->ReleaseBacking(*t.buffer());
    ASSERT_EQ(backend_->memory_stats().releasable_bytes_mapped, before.releasable_bytes_mapped);
    for (const Tensor& t : tensors) ASSERT_TRUE(backend_->RestoreBacking(*t.buffer()).ok());
    ASSERT_EQ(backend_->memory_stats().releasable_bytes_mapped,
              before.releasable_bytes_mapped + 8 * four_mib);
  }
  // The caching allocator is not involved.
  EXPECT_EQ(backend_->memory_stats().num_allocs, before.num_allocs);
  tensors.clear();
  EXPECT_EQ(backend_->memory_stats().releasable_bytes_mapped, before.releasable_bytes_mapped);
}

TEST_P(ReleasableMemoryTest, OnlyReleasableBuffersQualify) {
  Result<Tensor> plain = backend_->Allocate(DType::kF32, Shape{100});
  ASSERT_TRUE(plain.ok());
  // The cpu and sim backends give every tensor whole pages, so any qualifies; cuda's caching
  // allocator does not.
  EXPECT_EQ(backend_->IsReleasable(*plain->buffer()), backend_->device().type != DeviceType::kCuda);
}

INSTANTIATE_TEST_SUITE_P(Backends, ReleasableMemoryTest, ::testing::Values("cpu", "sim", "cuda:0"),
                         testing::BackendParamName);

}  // namespace
}  // namespace sy
