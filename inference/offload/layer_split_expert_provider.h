// LayerSplitExpertProvider: the `layer-split` expert policy, llama.cpp's static split (`-ngl`)
// as a baseline for cpu-compute (Fiddler compares against it; docs/offload.md). The experts of
// the first k MoE layers, k = min(num_slots / experts per layer, MoE layers), are copied to
// device slots at Attach (the `static` cache) and run there; every expert of every later layer
// runs on the CpuExpertExecutor (rows to the host, results back). Nothing moves at run time
// but activations. Slots past k whole layers stay unused, as llama.cpp offloads whole layers.
// Attach logs one line to stderr (LayerSplitOptions::log).
//
// Ownership and thread-safety: as MixedExpertProvider.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "inference/offload/mixed_expert_provider.h"

namespace sy::offload {

struct LayerSplitOptions {
  int num_slots = 0;    // device expert slots. Default: 0 = DefaultDeviceSlots (25% of experts)
  int cpu_threads = 0;  // CpuExpertExecutor threads. Default: 0 = SY_NUM_THREADS or all cores
  bool log = true;      // one line to stderr at Attach. Default: true
};

class LayerSplitExpertProvider final : public MixedExpertProvider {
 public:
  explicit LayerSplitExpertProvider(const LayerSplitOptions& options = {}) : options_(options) {}
  std::string name() const override { return "layer-split"; }

  // After Install: k, the MoE layers on the device.
  int device_layers() const { return device_layers_; }
  std::string Describe() const;

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  LayerSplitOptions options_;
  int device_layers_ = 0;
  std::vector<ExpertPlacement> placement_;  // scratch, per expert
};

}  // namespace sy::offload
