// Shared by the offload tests: random experts with their reference computation on the CPU
// backend (LocalExpertCompute, the model's own expert math), and a sim backend with a slow link.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "inference/offload/device_expert_cache.h"
#include "inference/offload/host_experts.h"
#include "inference/offload/swiglu_expert.h"
#include "inference/offload/transfer_engine.h"
#include "runtime/backend/backend.h"
#include "runtime/model/expert_compute.h"
#include "runtime/model/parameter_store.h"
#include "runtime/sim/sim_backend.h"

namespace sy::offload {

inline std::unique_ptr<SimBackend> MakeSim(double gbps, size_t memory_bytes,
                                           double latency_us = 10.0) {
  BackendOptions options;
  options.sim.link_gbps = gbps;
  options.sim.link_latency_us = latency_us;
  options.sim.memory_bytes = memory_bytes;
  return std::make_unique<SimBackend>(options);
}

// Random experts of `layout` on a CPU backend, computed by LocalExpertCompute.
class ReferenceExperts {
 public:
  ReferenceExperts(const ExpertLayout& layout, uint64_t seed)
      : layout_(layout), cpu_(std::move(CreateBackend(Device::Cpu()).value())) {
    for (int m = 0; m < layout.num_layers; ++m) {
      layers_.push_back(LocalExpertCompute::Create(*cpu_, store_, m, layout.num_experts,
                                                   layout.hidden, layout.intermediate,
                                                   ExpertMatrixDTypes::All(layout.dtype),
                                                   /*with_grad=*/false)
                            .value());
    }
    SY_CHECK_OK(store_.Initialize(*cpu_, seed, 0.05f));
  }

  const ExpertLayout& layout() const { return layout_; }

  // The weights of chunk `c` of `key` (a host view).
  Tensor Weight(ExpertKey key, ExpertChunk c) const {
    const LocalExpertCompute& l = *layers_[key.layer];
    const Tensor& stacked = c == ExpertChunk::kGate ? l.w_gate()
                            : c == ExpertChunk::kUp ? l.w_up()
                                                    : l.w_down();
    return stacked.Select(key.expert);
  }

  // Host experts (pinned memory of `backend`) holding the same weights.
  std::unique_ptr<HostExperts> MakeHost(Backend& backend) const {
    auto host = HostExperts::Create(backend, layout_).value();
    for (uint32_t m = 0; m < static_cast<uint32_t>(layout_.num_layers); ++m) {
      for (uint32_t e = 0; e < static_cast<uint32_t>(layout_.num_experts); ++e) {
        for (ExpertChunk c : kExpertChunks) {
          Tensor src = Weight({m, e}, c);
          Tensor dst = host->chunk({m, e}, c);
          std::memcpy(dst.data(), src.data(), src.nbytes());
        }
      }
    }
    return host;
  }

  // y = expert(x) through LocalExpertCompute's grouped GEMMs, every row routed to `key`.
  std::vector<float> Forward(ExpertKey key, const std::vector<float>& x) {
    const int64_t rows = static_cast<int64_t>(x.size()) / layout_.hidden;
    std::vector<int64_t> groups(layout_.num_experts, 0);
    groups[key.expert] = rows;
    Tensor xs = Tensor::Host(DType::kF32, Shape{rows, layout_.hidden});
    Tensor ys = Tensor::Host(DType::kF32, Shape{rows, layout_.hidden});
    std::memcpy(xs.data(), x.data(), x.size() * sizeof(float));
    SY_CHECK_OK(layers_[key.layer]->Forward(*cpu_, xs, groups, ys));
    layers_[key.layer]->Release();
    return std::vector<float>(ys.data<float>(), ys.data<float>() + x.size());
  }

 private:
  ExpertLayout layout_;
  std::unique_ptr<Backend> cpu_;
  ParameterStore store_;
  std::vector<std::unique_ptr<LocalExpertCompute>> layers_;
};

inline DeviceExpertCacheOptions CacheOptions(int num_slots, DeviceCachePolicy policy) {
  DeviceExpertCacheOptions options;
  options.num_slots = num_slots;
  options.policy = policy;
  return options;
}

inline std::vector<float> RandomRows(int64_t rows, int64_t hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * hidden));
  for (float& v : x) v = normal(rng);
  return x;
}

// Max |a - b| / (1 + max |b|).
inline double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  SY_CHECK_EQ(a.size(), b.size()) << "sizes";
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return err / (1.0 + scale);
}

inline void PoisonSlots(Backend& sim, DeviceExpertCache& cache) {
  for (int s = 0; s < cache.num_slots(); ++s) {
    for (ExpertChunk c : kExpertChunks) {
      sim.Fill(cache.chunk(s, c), std::numeric_limits<float>::quiet_NaN());
    }
  }
}

// Every expert of `reference`, twice, fetched from `source` at HIGH through a 3-slot LRU device
// cache and computed on its slot (RunSwigluExpert), each checked against LocalExpertCompute.
// Adds the activation bytes it sent host -> device to *activation_bytes. Returns the engine's
// stats.
inline TransferStats ExpectDevicePathMatchesReference(ReferenceExperts& reference, Backend& sim,
                                                      HostExpertSource& source,
                                                      size_t* activation_bytes) {
  const ExpertLayout& layout = reference.layout();
  auto cache =
      DeviceExpertCache::Create(sim, layout, CacheOptions(3, DeviceCachePolicy::kLru)).value();
  PoisonSlots(sim, *cache);
  TransferEngine engine(sim, source, *cache);
  uint32_t seed = 100;
  for (int round = 0; round < 2; ++round) {
    for (uint32_t m = 0; m < static_cast<uint32_t>(layout.num_layers); ++m) {
      for (uint32_t e = 0; e < static_cast<uint32_t>(layout.num_experts); ++e) {
        const ExpertKey key{m, e};
        const int64_t rows = 1 + (seed % 5);
        std::vector<float> x = RandomRows(rows, layout.hidden, seed++);
        *activation_bytes += x.size() * sizeof(float);
        SlotHandle pin = engine.Enqueue(TransferPriority::kHigh, key).value();
        EXPECT_TRUE(engine.Wait(pin).ok()) << key.ToString();
        Tensor xd = sim.Allocate(DType::kF32, Shape{rows, layout.hidden}).value();
        Tensor yd = sim.Allocate(DType::kF32, Shape{rows, layout.hidden}).value();
        sim.CopyAsync(Tensor::Wrap(x.data(), DType::kF32, xd.shape()), xd, sim.compute_stream());
        EXPECT_TRUE(RunSwigluExpert(sim, cache->chunk(pin.slot(), ExpertChunk::kGate),
                                    cache->chunk(pin.slot(), ExpertChunk::kUp),
                                    cache->chunk(pin.slot(), ExpertChunk::kDown), xd, yd)
                        .ok());
        std::vector<float> y(x.size());
        sim.CopyAsync(yd, Tensor::Wrap(y.data(), DType::kF32, yd.shape()), sim.compute_stream());
        sim.SynchronizeStream(sim.compute_stream());
        EXPECT_LE(MaxRelError(y, reference.Forward(key, x)), 1e-5) << key.ToString();
      }
    }
  }
  engine.Drain();
  return engine.stats();
}

}  // namespace sy::offload
