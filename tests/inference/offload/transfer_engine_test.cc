// TransferEngine over a DeviceExpertCache on the sim backend with a slow link: results equal the
// CPU reference, readiness comes only after the copy, HIGH jumps the LOW queue at a chunk
// boundary, and cancelled tasks move no bytes.
#include "inference/offload/transfer_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <thread>
#include <vector>

#include "tests/inference/offload/offload_test_util.h"

namespace sy::offload {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The bytes of a device chunk, copied back to the host.
std::vector<std::byte> ReadBack(Backend& sim, const Tensor& device) {
  Tensor host = Tensor::Host(device.dtype(), device.shape());
  sim.CopyAsync(device, host, sim.compute_stream());
  sim.SynchronizeStream(sim.compute_stream());
  auto* p = static_cast<const std::byte*>(host.data());
  return std::vector<std::byte>(p, p + host.nbytes());
}

std::vector<std::byte> Bytes(const Tensor& host) {
  auto* p = static_cast<const std::byte*>(host.data());
  return std::vector<std::byte>(p, p + host.nbytes());
}

void ExpectDeviceMatchesReference(DType dtype) {
  SCOPED_TRACE(std::string(DTypeName(dtype)));
  const ExpertLayout layout{
      .num_layers = 2, .num_experts = 4, .hidden = 64, .intermediate = 96, .dtype = dtype};
  ReferenceExperts reference(layout, 7);
  auto sim = MakeSim(/*gbps=*/4.0, size_t{64} << 20);
  auto host = reference.MakeHost(*sim);
  size_t activation_bytes = 0;
  const TransferStats stats =
      ExpectDevicePathMatchesReference(reference, *sim, *host, &activation_bytes);
  // 8 experts through 3 slots, twice: every access misses, and every miss copied one expert.
  EXPECT_EQ(stats.tasks_queued, 16u);
  EXPECT_EQ(stats.tasks_completed, 16u);
  EXPECT_EQ(stats.bytes_host_to_device, 16 * layout.expert_bytes());
  // The link's own count: the experts plus the activations this test sent.
  EXPECT_EQ(sim->host_to_device_stats().bytes, 16 * layout.expert_bytes() + activation_bytes);
}

TEST(TransferEngineTest, DeviceExpertEqualsLocalExpertComputeF32) {
  ExpectDeviceMatchesReference(DType::kF32);
}

TEST(TransferEngineTest, DeviceExpertEqualsLocalExpertComputeBf16) {
  ExpectDeviceMatchesReference(DType::kBF16);
}

TEST(TransferEngineTest, AChunkIsReadyOnlyAfterItsCopyCompleted) {
  // 16 KiB chunks over a link of 0.33 MB/s: 50 ms per chunk, far longer than the memcpy (which the
  // sim does first, then waits for the modelled end) and than this thread's polling lag. So a
  // chunk reported ready before its copy completed shows up as ready too early.
  const ExpertLayout layout{
      .num_layers = 1, .num_experts = 2, .hidden = 64, .intermediate = 64, .dtype = DType::kF32};
  const double gbps = static_cast<double>(layout.chunk_bytes()) / 0.05 / 1e9;
  const double chunk_s = 10e-6 + static_cast<double>(layout.chunk_bytes()) / (gbps * 1e9);
  ReferenceExperts reference(layout, 11);
  auto sim = MakeSim(gbps, size_t{16} << 20);
  auto host = reference.MakeHost(*sim);
  auto cache =
      DeviceExpertCache::Create(*sim, layout, CacheOptions(2, DeviceCachePolicy::kLru)).value();
  PoisonSlots(*sim, *cache);
  TransferEngine engine(*sim, *host, *cache);
  const Clock::time_point start = Clock::now();
  std::vector<SlotHandle> pins;
  for (uint32_t e = 0; e < 2; ++e) {
    pins.push_back(engine.Enqueue(TransferPriority::kLow, {0, e}).value());
  }
  // Poll readiness: the moment a chunk shows ready, the link must have had time to carry it and
  // every chunk queued before it, and its bytes must be on the device.
  std::map<int, double> seen;  // chunk number in queue order -> seconds after start
  while (seen.size() < 6) {
    for (uint32_t e = 0; e < 2; ++e) {
      for (ExpertChunk c : kExpertChunks) {
        const int n = static_cast<int>(e) * kNumExpertChunks + static_cast<int>(c);
        if (seen.count(n) || !cache->ChunkReady(pins[e].slot(), c)) continue;
        seen[n] = Seconds(Clock::now() - start);
        EXPECT_EQ(ReadBack(*sim, cache->chunk(pins[e].slot(), c)), Bytes(host->chunk({0, e}, c)))
            << "expert " << e << " chunk " << ExpertChunkName(c) << " ready before its data";
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (const auto& [n, t] : seen) {
    EXPECT_GE(t, 0.99 * (n + 1) * chunk_s) << "chunk " << n << " reported ready at " << t * 1e3
                                           << " ms, before the link could have carried it";
  }
  std::printf("chunk %.1f ms; chunks ready at %.1f %.1f %.1f %.1f %.1f %.1f ms\n", chunk_s * 1e3,
              seen[0] * 1e3, seen[1] * 1e3, seen[2] * 1e3, seen[3] * 1e3, seen[4] * 1e3,
              seen[5] * 1e3);
  for (uint32_t e = 0; e < 2; ++e) {
    ASSERT_TRUE(engine.Wait(pins[e]).ok());
    for (ExpertChunk c : kExpertChunks) {
      EXPECT_EQ(ReadBack(*sim, cache->chunk(pins[e].slot(), c)), Bytes(host->chunk({0, e}, c)));
    }
  }
}

// Queues `low` LOW experts, lets the first chunk start, then asks for one more expert at
// `priority` and returns how long its Enqueue + Wait took.
double WaitBehindLowQueue(TransferPriority priority, int low, TransferStats* stats_out) {
  const ExpertLayout layout{.num_layers = 1,
                            .num_experts = low + 1,
                            .hidden = 2048,
                            .intermediate = 2048,
                            .dtype = DType::kF32};
  auto sim = MakeSim(/*gbps=*/1.0, size_t{512} << 20);
  auto host = HostExperts::Create(*sim, layout).value();
  auto cache =
      DeviceExpertCache::Create(*sim, layout, CacheOptions(low + 1, DeviceCachePolicy::kLru))
          .value();
  // Touch every page first, so page faults do not slow the copies below the link's rate.
  for (uint32_t e = 0; e <= static_cast<uint32_t>(low); ++e) {
    for (ExpertChunk c : kExpertChunks) {
      Tensor chunk = host->chunk({0, e}, c);
      std::memset(chunk.data(), 0, chunk.nbytes());
    }
  }
  PoisonSlots(*sim, *cache);
  TransferEngine engine(*sim, *host, *cache);
  std::vector<SlotHandle> pins;
  for (uint32_t e = 0; e < static_cast<uint32_t>(low); ++e) {
    pins.push_back(engine.Enqueue(TransferPriority::kLow, {0, e}).value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const Clock::time_point start = Clock::now();
  SlotHandle pin = engine.Enqueue(priority, {0, static_cast<uint32_t>(low)}).value();
  EXPECT_TRUE(engine.Wait(pin).ok());
  const double waited = Seconds(Clock::now() - start);
  if (priority == TransferPriority::kHigh) {
    // It overtook the queue: the last LOW expert has not landed yet.
    EXPECT_FALSE(cache->Ready(pins.back().slot()));
  }
  engine.Drain();
  *stats_out = engine.stats();
  return waited;
}

TEST(TransferEngineTest, AHighTaskWaitsAtMostOneChunkOfTheLowQueue) {
  // 16 MiB chunks over a 1 GB/s link: 16.8 ms per chunk, 50 ms per expert (long beside the
  // scheduling delays of a loaded machine); 6 LOW experts queued.
  const int low = 6;
  const double chunk_s = 10e-6 + static_cast<double>(size_t{16} << 20) / 1e9;
  TransferStats high_stats, fifo_stats;
  const double high = WaitBehindLowQueue(TransferPriority::kHigh, low, &high_stats);
  const double fifo = WaitBehindLowQueue(TransferPriority::kLow, low, &fifo_stats);
  // The chunk time this machine achieved, from the request that went through the whole queue
  // (on a loaded machine the copies run slower than the link model).
  const double chunk_measured = fifo / (3 * low + 3 - 0.5);
  std::printf(
      "chunk %.2f ms (link model), %.2f ms (measured through the LOW queue): HIGH behind "
      "%d LOW experts waited %.2f ms = %.2f chunks (bound: one chunk + its own three); "
      "the same request at LOW waited %.2f ms = %.2f chunks (model: the whole queue, "
      "%.1f)\n",
      chunk_s * 1e3, chunk_measured * 1e3, low, high * 1e3, high / chunk_measured, fifo * 1e3,
      fifo / chunk_measured, 3 * low + 3 - 0.5);
  // Its own three chunks at least; at most the chunk in flight plus its own, with a generous
  // margin for a loaded 2-core machine (6 chunks).
  EXPECT_GE(high, 0.99 * 3 * chunk_s);
  EXPECT_LE(high, 6 * chunk_measured);
  // Without priority it waits for the queue: at least 16 of the 18 queued chunks, plus its own.
  EXPECT_GE(fifo, (16 + 3) * chunk_s);
  EXPECT_LT(3 * high, fifo);
  EXPECT_EQ(high_stats.tasks_completed, static_cast<uint64_t>(low + 1));
  EXPECT_EQ(high_stats.waits, 1u);
  EXPECT_GE(high_stats.stall_ns, static_cast<uint64_t>(0.9 * 3 * chunk_s * 1e9));
  EXPECT_LE(high_stats.stall_ns, static_cast<uint64_t>(high * 1e9) + 1);
}

TEST(TransferEngineTest, ALowTaskAskedForAgainAtHighIsPromoted) {
  const ExpertLayout layout{.num_layers = 1,
                            .num_experts = 4,
                            .hidden = 1024,
                            .intermediate = 1024,
                            .dtype = DType::kF32};
  auto sim = MakeSim(/*gbps=*/2.0, size_t{128} << 20);
  auto host = HostExperts::Create(*sim, layout).value();
  auto cache =
      DeviceExpertCache::Create(*sim, layout, CacheOptions(4, DeviceCachePolicy::kLru)).value();
  TransferEngine engine(*sim, *host, *cache);
  std::vector<SlotHandle> pins;
  for (uint32_t e = 0; e < 4; ++e) {
    pins.push_back(engine.Enqueue(TransferPriority::kLow, {0, e}).value());
  }
  SlotHandle again = engine.Enqueue(TransferPriority::kHigh, {0, 3}).value();
  EXPECT_EQ(again.slot(), pins[3].slot());
  ASSERT_TRUE(engine.Wait(again).ok());
  EXPECT_FALSE(cache->Ready(pins[2].slot())) << "expert 3 should have overtaken expert 2";
  engine.Drain();
  const TransferStats stats = engine.stats();
  EXPECT_EQ(stats.promoted, 1u);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.tasks_queued, 4u);
  EXPECT_EQ(stats.bytes_host_to_device, 4 * layout.expert_bytes());
}

TEST(TransferEngineTest, CancelledTasksMoveNoBytesAndStatsAddUp) {
  // 4 MiB chunks over 1 GB/s: the HIGH expert takes 12.6 ms, time to cancel the LOW queue behind
  // it before the worker reaches it.
  const ExpertLayout layout{.num_layers = 2,
                            .num_experts = 4,
                            .hidden = 1024,
                            .intermediate = 1024,
                            .dtype = DType::kF32};
  auto sim = MakeSim(/*gbps=*/1.0, size_t{256} << 20);
  auto host = HostExperts::Create(*sim, layout).value();
  auto cache =
      DeviceExpertCache::Create(*sim, layout, CacheOptions(8, DeviceCachePolicy::kLru)).value();
  TransferEngine engine(*sim, *host, *cache);
  SlotHandle first = engine.Enqueue(TransferPriority::kHigh, {0, 0}).value();
  std::vector<SlotHandle> low;
  for (uint32_t e = 1; e < 4; ++e)
    low.push_back(engine.Enqueue(TransferPriority::kLow, {0, e}).value());
  for (uint32_t e = 0; e < 2; ++e)
    low.push_back(engine.Enqueue(TransferPriority::kLow, {1, e}).value());
  EXPECT_TRUE(engine.Cancel({1, 1}));
  EXPECT_EQ(engine.CancelLow(/*layer=*/1), 1);  // {1, 0}
  EXPECT_EQ(engine.CancelLow(), 3);             // {0, 1..3}
  EXPECT_FALSE(engine.Cancel({1, 1})) << "already gone";
  ASSERT_TRUE(engine.Wait(first).ok());
  engine.Drain();
  EXPECT_FALSE(engine.Cancel({0, 0})) << "finished tasks cannot be cancelled";
  TransferStats stats = engine.stats();
  EXPECT_EQ(stats.tasks_queued, 6u);
  EXPECT_EQ(stats.tasks_completed, 1u);
  EXPECT_EQ(stats.tasks_cancelled, 5u);
  EXPECT_EQ(stats.chunks_copied, 3u);
  EXPECT_EQ(stats.bytes_host_to_device, layout.expert_bytes());
  EXPECT_EQ(sim->host_to_device_stats().bytes, layout.expert_bytes()) << "the link's own count";
  for (const SlotHandle& h : low) {
    EXPECT_EQ(engine.Wait(h).code(), StatusCode::kFailedPrecondition) << h.key().ToString();
    EXPECT_EQ(cache->Lookup(h.key()), -1);
    EXPECT_FALSE(cache->Ready(h.slot()));
  }
  EXPECT_EQ(engine.Wait(ExpertKey{1, 1}).status().code(), StatusCode::kNotFound);
  low.clear();
  EXPECT_EQ(cache->Resident().size(), 1u);

  // A partly copied expert: cancelled after its first chunk landed. The chunk in flight may
  // still land, the rest never move, and the slot is not left half-ready.
  sim->ResetLinkStats();
  SlotHandle partial = engine.Enqueue(TransferPriority::kLow, {1, 3}).value();
  while (!cache->ChunkReady(partial.slot(), ExpertChunk::kGate)) std::this_thread::yield();
  EXPECT_TRUE(engine.Cancel({1, 3}));
  engine.Drain();
  const size_t moved = sim->host_to_device_stats().bytes;
  EXPECT_GE(moved, layout.chunk_bytes());
  EXPECT_LE(moved, 2 * layout.chunk_bytes());
  EXPECT_EQ(engine.stats().bytes_host_to_device - stats.bytes_host_to_device, moved);
  EXPECT_FALSE(cache->ChunkReady(partial.slot(), ExpertChunk::kGate));
  EXPECT_EQ(engine.Wait(partial).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache->Lookup({1, 3}), -1);
  partial.Release();
  stats = engine.stats();
  EXPECT_EQ(stats.tasks_queued, stats.tasks_completed + stats.tasks_cancelled);
  EXPECT_EQ(stats.bytes_host_to_device, stats.chunks_copied * layout.chunk_bytes());
  // Asked for again, it is copied whole into a fresh fill.
  SlotHandle again = engine.Enqueue(TransferPriority::kHigh, {1, 3}).value();
  ASSERT_TRUE(engine.Wait(again).ok());
  EXPECT_TRUE(cache->Ready(again.slot()));
}

}  // namespace
}  // namespace sy::offload
