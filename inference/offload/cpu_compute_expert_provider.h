// CpuComputeExpertProvider: the `cpu-compute` expert policy (Fiddler / Twiddler; papers/DIGEST.md,
// docs/offload.md). Per MoE layer, after the gate, each activated expert with s rows:
//   - in a device slot                                  -> runs on the device
//   - else cpu(s) > device(s) + transfer (the model)    -> its weights are copied (HIGH) into a
//                                                          scratch slot and it runs there
//   - else                                              -> its rows go to the host, it runs on the
//                                                          CpuExpertExecutor, the results come back
// (FiddlerPlacement, inference/offload/latency_model.h), all through a MixedExpertRunner: the CPU
// experts run concurrently with the device ones.
//
// Attach: the host tier; the latency model, calibrated on this machine (CalibrateLatencyModel)
// unless one is given; then num_slots device slots (default DefaultDeviceSlots: a quarter of all
// experts) under the `static` cache: the scratch slots take fetched experts, which leave after
// their run, and the other slots hold the most popular experts of the profile for good (no
// profile: UniformPlacement), copied at Attach. With another cache policy (lru, lfu, none) there
// is no static set and fetched experts stay as that policy decides. Attach logs one line to
// stderr with the slots and the fitted model (CpuComputeOptions::log).
//
// Ownership and thread-safety: as MixedExpertProvider.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "inference/offload/latency_model.h"
#include "inference/offload/mixed_expert_provider.h"

namespace sy::offload {

struct CpuComputeOptions {
  int num_slots = 0;  // device expert slots. Default: 0 = DefaultDeviceSlots (25% of experts)
  // Slots kept for fetched experts under `static`. Default: 0 = max(1, num_slots / 8)
  int scratch_slots = 0;
  DeviceCachePolicy cache_policy = DeviceCachePolicy::kStatic;  // Default: static (Fiddler)
  std::string profile;  // expert profile file (expert_profile.h). Default: "" = uniform
  // The latency model to decide with. Default: unset = calibrate at Attach
  std::optional<ExpertLatencyModel> latency_model;
  CalibrationOptions calibration;  // how to calibrate. Default: CalibrationOptions{}
  int cpu_threads = 0;  // CpuExpertExecutor threads. Default: 0 = SY_NUM_THREADS or all cores
  bool log = true;      // one line to stderr at Attach. Default: true
};

class CpuComputeExpertProvider final : public MixedExpertProvider {
 public:
  explicit CpuComputeExpertProvider(CpuComputeOptions options = {})
      : options_(std::move(options)) {}
  std::string name() const override { return "cpu-compute"; }

  // After Install: the model the rule decides with.
  const ExpertLatencyModel& latency_model() const { return latency_; }
  // One line: slots, static experts, the model.
  std::string Describe() const;
  // MixedExpertProvider's, plus the latency model (latency_transfer_ms, latency_cpu1_ms,
  // latency_device1_ms).
  std::map<std::string, double> extra_metrics() const override;

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  CpuComputeOptions options_;
  ExpertLatencyModel latency_;
  std::vector<ExpertPlacement> placement_;  // scratch, per expert
};

}  // namespace sy::offload
