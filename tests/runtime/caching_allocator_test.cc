// CachingAllocator: reuse of freed blocks, device-allocation counts, out-of-memory handling
// (EmptyCache then retry, ResourceExhausted status) and peak statistics, over a fake device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "runtime/backend/caching_allocator.h"

namespace sy {
namespace {

// A fake device with a hard capacity, counting raw calls.
class FakeDevice {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() { EXPECT_TRUE(live_.empty()) << "raw blocks leaked"; }

  void* Allocate(size_t bytes) {
    ++raw_allocs;
    if (used_ + bytes > capacity_) {
      ++raw_failures;
      return nullptr;
    }
    void* p = std::malloc(bytes);
    live_[p] = bytes;
    used_ += bytes;
    return p;
  }
  void Free(void* p, size_t bytes) {
    ++raw_frees;
    EXPECT_EQ(live_.at(p), bytes);
    used_ -= bytes;
    live_.erase(p);
    std::free(p);
  }

  CachingAllocator::RawAllocateFn allocate_fn() {
    return [this](size_t b) { return Allocate(b); };
  }
  CachingAllocator::RawFreeFn free_fn() {
    return [this](void* p, size_t b) { Free(p, b); };
  }
  size_t used() const { return used_; }

  int raw_allocs = 0, raw_frees = 0, raw_failures = 0;

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
};

TEST(CachingAllocator, ReusesFreedBlocks) {
  FakeDevice device(1 << 20);
  CachingAllocator alloc(Device::Sim(), device.allocate_fn(), device.free_fn(), 1 << 20);
  void* first = nullptr;
  {
    Result<std::shared_ptr<Buffer>> a = alloc.Allocate(1000);
    ASSERT_TRUE(a.ok());
    first = (*a)->data();
    EXPECT_EQ((*a)->bytes(), 1000u);
    EXPECT_EQ((*a)->device(), Device::Sim());
    EXPECT_EQ(alloc.stats().bytes_in_use, 1024u);  // rounded to 512
  }
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().bytes_reserved, 1024u);
  {
    Result<std::shared_ptr<Buffer>> b = alloc.Allocate(900);  // same rounded size: reused
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)->data(), first);
  }
  MemoryStats s = alloc.stats();
  EXPECT_EQ(s.num_allocs, 2u);
  EXPECT_EQ(s.num_device_allocs, 1u);
  EXPECT_EQ(device.raw_allocs, 1);
}

TEST(CachingAllocator, DoesNotReuseBlocksMoreThanTwiceTooLarge) {
  FakeDevice device(1 << 20);
  CachingAllocator alloc(Device::Sim(), device.allocate_fn(), device.free_fn(), 0);
  { ASSERT_TRUE(alloc.Allocate(8192).ok()); }
  {
    Result<std::shared_ptr<Buffer>> small = alloc.Allocate(1000);  // 1024: 8192 > 2 * 1024
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(alloc.stats().num_device_allocs, 2u);
  }
  {
    Result<std::shared_ptr<Buffer>> mid = alloc.Allocate(4096);  // 8192 <= 2 * 4096: reused
    ASSERT_TRUE(mid.ok());
    EXPECT_EQ(alloc.stats().num_device_allocs, 2u);
    EXPECT_EQ(alloc.stats().bytes_in_use, 8192u);
  }
  alloc.EmptyCache();
  EXPECT_EQ(alloc.stats().bytes_reserved, 0u);
  EXPECT_EQ(device.used(), 0u);
  EXPECT_EQ(device.raw_frees, 2);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheThenRetries) {
  FakeDevice device(8192);
  CachingAllocator alloc(Device::Sim(), device.allocate_fn(), device.free_fn(), 8192);
  { ASSERT_TRUE(alloc.Allocate(4096).ok()); }  // cached, still reserved on the device
  EXPECT_EQ(device.used(), 4096u);
  // 6144 does not fit beside the cached 4096 block (and that block is too small to reuse):
  // the allocator must return its cache to the device and retry.
  Result<std::shared_ptr<Buffer>> big = alloc.Allocate(6144);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(device.raw_failures, 1);
  EXPECT_EQ(alloc.stats().bytes_reserved, 6144u);
  // Now nothing fits: a Status, not an abort.
  Result<std::shared_ptr<Buffer>> too_much = alloc.Allocate(4096);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_much.status().message().find("out of memory"), std::string::npos);
  // The failed request changed nothing in use.
  EXPECT_EQ(alloc.stats().bytes_in_use, 6144u);
}

TEST(CachingAllocator, TracksPeak) {
  FakeDevice device(1 << 20);
  CachingAllocator alloc(Device::Sim(), device.allocate_fn(), device.free_fn(), 0);
  {
    Result<std::shared_ptr<Buffer>> a = alloc.Allocate(2048);
    Result<std::shared_ptr<Buffer>> b = alloc.Allocate(4096);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(alloc.stats().peak_bytes_in_use, 6144u);
  }
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 6144u);
  alloc.ResetPeak();
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 0u);
  Result<std::shared_ptr<Buffer>> c = alloc.Allocate(512);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 512u);
}

TEST(CachingAllocatorDeathTest, BufferOutlivingItsAllocatorAborts) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_DEATH(
      {
        FakeDevice* device = new FakeDevice(1 << 20);  // leaked on purpose: the child aborts
        std::shared_ptr<Buffer> kept;
        {
          CachingAllocator alloc(Device::Sim(), device->allocate_fn(), device->free_fn(), 0);
          Result<std::shared_ptr<Buffer>> a = alloc.Allocate(512);
          kept = *a;
        }
      },
      "destroyed with live buffers");
}

}  // namespace
}  // namespace sy
