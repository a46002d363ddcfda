// Workspace (runtime/backend/workspace.h): a bound workspace serves Allocate and AllocateHost of
// the binding thread without an allocator call, Rewind gives memory back for reuse, a request past
// the arena goes to the allocator once and the next Reset grows the arena to fit, other threads
// and persistent allocations bypass it, and it works on every backend (sim: inside the budget).
#include "runtime/backend/workspace.h"

#include <gtest/gtest.h>

#include <thread>

#include "runtime/backend/backend.h"
#include "tests/runtime/backend_param_test.h"

namespace sy {
namespace {

class WorkspaceTest : public testing::BackendParamTest {
 protected:
  size_t DeviceAllocs() const { return backend_->memory_stats().num_allocs; }
};

TEST_P(WorkspaceTest, BoundAllocationsComeFromTheArenaAndRewindReusesThem) {
  Workspace ws(*backend_);
  ASSERT_TRUE(ws.Reserve(size_t{1} << 20, size_t{1} << 16).ok());
  const size_t before = DeviceAllocs();
  const uint64_t host_before = backend_->host_allocations();
  const void* first = nullptr;
  {
    WorkspaceBinding bind(*backend_, ws);
    EXPECT_EQ(backend_->bound_workspace(), &ws);
    Result<Tensor> a = backend_->Allocate(DType::kF32, Shape{10, 3});
    ASSERT_TRUE(a.ok());
    first = a->data();
    const Workspace::Mark mark = ws.mark();
    Result<Tensor> b = backend_->Allocate(DType::kBF16, Shape{7});
    Result<Tensor> h = backend_->AllocateHost(DType::kI32, Shape{5});
    ASSERT_TRUE(b.ok() && h.ok());
    EXPECT_NE(b->data(), a->data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 256, 0u);
    EXPECT_TRUE(h->device().is_host());
    ws.Rewind(mark);
    Result<Tensor> c = backend_->Allocate(DType::kF32, Shape{2});
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->data(), b->data()) << "the rewound bytes are reused";
  }
  EXPECT_EQ(DeviceAllocs(), before);
  EXPECT_EQ(backend_->host_allocations(), host_before);
  EXPECT_EQ(ws.overflows(), 0);
  EXPECT_EQ(ws.takes(), 4);
  EXPECT_EQ(backend_->bound_workspace(), nullptr);
  // A new step starts at the same place.
  ASSERT_TRUE(ws.Reset().ok());
  WorkspaceBinding bind(*backend_, ws);
  EXPECT_EQ(backend_->Allocate(DType::kF32, Shape{1})->data(), first);
}

TEST_P(WorkspaceTest, OverflowGoesToTheAllocatorOnceThenTheArenaGrows) {
  Workspace ws(*backend_);
  auto step = [&] {
    EXPECT_TRUE(ws.Reset().ok());
    WorkspaceBinding bind(*backend_, ws);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(backend_->Allocate(DType::kF32, Shape{1000}).ok());
    EXPECT_TRUE(backend_->AllocateHost(DType::kF32, Shape{300}).ok());
  };
  step();  // an empty arena: everything overflows
  EXPECT_EQ(ws.overflows(), 5);
  EXPECT_GE(ws.device_peak(), 4 * 4000u);
  step();  // Reset grew both arenas: nothing overflows
  EXPECT_EQ(ws.overflows(), 5);
  EXPECT_GE(ws.device_capacity(), ws.device_peak());
  const size_t before = DeviceAllocs();
  const uint64_t host_before = backend_->host_allocations();
  step();
  EXPECT_EQ(DeviceAllocs(), before);
  EXPECT_EQ(backend_->host_allocations(), host_before);
}

TEST_P(WorkspaceTest, OtherThreadsAndPersistentAllocationsBypassIt) {
  Workspace ws(*backend_);
  ASSERT_TRUE(ws.Reserve(size_t{1} << 16, 0).ok());
  WorkspaceBinding bind(*backend_, ws);
  const size_t before = DeviceAllocs();
  std::thread other([&] {
    EXPECT_EQ(backend_->bound_workspace(), nullptr);
    EXPECT_TRUE(backend_->Allocate(DType::kF32, Shape{4}).ok());
  });
  other.join();
  EXPECT_TRUE(backend_->AllocatePersistent(DType::kF32, Shape{4}).ok());
  EXPECT_EQ(DeviceAllocs(), before + 2);
  EXPECT_EQ(ws.takes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, WorkspaceTest, ::testing::Values("cpu", "sim", "cuda:0"),
                         testing::BackendParamName);

TEST(WorkspaceDeathTest, OneBindingPerBackend) {
  std::unique_ptr<Backend> backend = CreateBackend(Device::Cpu()).value();
  Workspace a(*backend), b(*backend);
  WorkspaceBinding bind(*backend, a);
  EXPECT_DEATH(WorkspaceBinding(*backend, b), "one bound Workspace at a time");
}

}  // namespace
}  // namespace sy
