// Tensor views: Slice, Select, Reshape, Wrap, Host, TryHost, and the aborts on out-of-bounds
// views.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "runtime/core/tensor.h"

namespace sy {
namespace {

TEST(Tensor, HostIsZeroedContiguousAndOwned) {
  Tensor t = Tensor::Host(DType::kF32, {3, 4});
  EXPECT_TRUE(t.defined());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.stride(0), 4);
  EXPECT_EQ(t.stride(1), 1);
  EXPECT_TRUE(t.device().is_host());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  EXPECT_EQ(t.ToString(), "f32[3, 4] on cpu");
  EXPECT_NE(t.buffer(), nullptr);
}

// Issue 20, defect 2: a size no memory holds is a ResourceExhausted Status, not an abort; that
// includes sizes past the address space and byte counts that overflow.
TEST(Tensor, TryHostReportsWhatCannotBeAllocated) {
  Result<Tensor> ok = Tensor::TryHost(DType::kI32, {2, 3});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->numel(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ok->data<int32_t>()[i], 0);
  // 2^48 bytes: more than a 47-bit user address space, whatever the overcommit policy.
  Result<Tensor> huge = Tensor::TryHost(DType::kI32, {int64_t{1} << 42, 16});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("i32[4398046511104, 16]"), std::string::npos)
      << huge.status().message();
  Result<Tensor> overflow = Tensor::TryHost(DType::kF32, {int64_t{1} << 62});
  EXPECT_EQ(overflow.status().code(), StatusCode::kResourceExhausted);
}

TEST(Tensor, DefaultIsUndefined) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(t.data(), nullptr);
}

TEST(Tensor, SliceAndSelectShareMemory) {
  Tensor t = Tensor::Host(DType::kI32, {4, 3});
  std::iota(t.data<int32_t>(), t.data<int32_t>() + 12, 0);
  Tensor rows = t.Slice(1, 3);
  EXPECT_EQ(rows.shape(), Shape({2, 3}));
  EXPECT_EQ(rows.data<int32_t>()[0], 3);
  EXPECT_EQ(rows.buffer(), t.buffer());
  EXPECT_TRUE(rows.is_contiguous());
  rows.data<int32_t>()[0] = 100;
  EXPECT_EQ(t.data<int32_t>()[3], 100);

  Tensor row = t.Select(3);
  EXPECT_EQ(row.shape(), Shape({3}));
  EXPECT_EQ(row.data<int32_t>()[2], 11);

  Tensor empty = t.Slice(2, 2);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.defined());
}

TEST(Tensor, ReshapeKeepsDataAndChecksNumel) {
  Tensor t = Tensor::Host(DType::kF32, {2, 6});
  t.data<float>()[7] = 5.0f;
  Tensor r = t.Reshape({3, 2, 2});
  EXPECT_EQ(r.rank(), 3);
  EXPECT_EQ(r.stride(0), 4);
  EXPECT_EQ(r.data<float>()[7], 5.0f);
  EXPECT_EQ(r.data(), t.data());
}

TEST(Tensor, WrapIsANonOwningView) {
  std::vector<float> storage(6, 2.5f);
  Tensor w = Tensor::Wrap(storage.data(), DType::kF32, {2, 3});
  EXPECT_EQ(w.buffer(), nullptr);
  EXPECT_EQ(w.data<float>(), storage.data());
  EXPECT_EQ(w.Select(1).data<float>(), storage.data() + 3);
  Tensor on_sim = Tensor::Wrap(storage.data(), DType::kF32, {6}, Device::Sim());
  EXPECT_EQ(on_sim.device(), Device::Sim());
  EXPECT_FALSE(on_sim.device().is_host());
}

using TensorDeathTest = testing::Test;

TEST_F(TensorDeathTest, OutOfBoundsViewsAbort) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor t = Tensor::Host(DType::kF32, {4, 3});
  EXPECT_DEATH(t.Slice(2, 5), "Slice");
  EXPECT_DEATH(t.Slice(3, 2), "Slice");
  EXPECT_DEATH(t.Slice(-1, 2), "Slice");
  EXPECT_DEATH(t.Select(4), "Slice");
  EXPECT_DEATH(t.Reshape({5, 2}), "Reshape");
  EXPECT_DEATH(t.data<int32_t>(), "data<i32> on a f32 tensor");
  EXPECT_DEATH(t.stride(2), "stride");
  Tensor scalar = Tensor::Host(DType::kF32, {});
  EXPECT_DEATH(scalar.Slice(0, 1), "Slice of a scalar");
}

TEST_F(TensorDeathTest, TensorOverrunningItsBufferAborts) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  Tensor t = Tensor::Host(DType::kF32, {4});
  EXPECT_DEATH(Tensor(t.buffer(), DType::kF32, {5}), "overruns its buffer");
  EXPECT_DEATH(Tensor(t.buffer(), DType::kF32, {4}, 4), "overruns its buffer");
}

TEST(Shape, BasicsAndStrides) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.ToString(), "[2, 3, 4]");
  auto strides = s.ContiguousStrides();
  EXPECT_EQ(strides[0], 12);
  EXPECT_EQ(strides[1], 4);
  EXPECT_EQ(strides[2], 1);
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_NE(s, Shape({2, 3}));
}

}  // namespace
}  // namespace sy
