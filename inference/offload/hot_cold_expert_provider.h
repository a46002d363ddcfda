// HotColdExpertProvider: the `hot-cold` expert policy (MoNDE; papers/DIGEST.md, docs/offload.md).
// Per MoE layer, after the gate: the active experts sorted by rows (most first, ties by index);
// the top H are copied to device slots (HIGH) and run there, the rest run on the CpuExpertExecutor
// with their rows moved to the host, concurrently (a MixedExpertRunner). An expert outside the
// top H that is in a slot anyway (a cache other than `none`) runs on the device.
//
//   H = alpha * BW_link / (BW_cpu + BW_link) * active        (HotColdCount)
// BW_link and BW_cpu come from the latency model (calibrated at Attach unless given). alpha
// starts at HotColdOptions::alpha; with tune_alpha, every retune_every layer runs it is re-tuned
// by replaying the last `history` recorded layer batches (rows per expert) under the model for a
// grid of alphas (TuneHotColdAlpha) and keeping the fastest.
//
// Device slots: num_slots (default DefaultDeviceSlots, a quarter of all experts) under
// cache_policy (default `none`: the hot experts are copied every step, as MoNDE's parameter
// move). Under `static` the profile's most popular experts hold all slots but max(1, slots / 8).
// Attach logs one line to stderr (HotColdOptions::log).
//
// Ownership and thread-safety: as MixedExpertProvider.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "inference/offload/latency_model.h"
#include "inference/offload/mixed_expert_provider.h"

namespace sy::offload {

struct HotColdOptions {
  int num_slots = 0;  // device expert slots. Default: 0 = DefaultDeviceSlots (25% of experts)
  DeviceCachePolicy cache_policy = DeviceCachePolicy::kNone;  // Default: none
  std::string profile;     // `static` cache only: expert profile file. Default: "" = uniform
  double alpha = 1.0;      // the starting alpha, >= 0. Default: 1
  bool tune_alpha = true;  // re-tune alpha by replay. Default: true
  int retune_every = 32;   // layer runs between tunings. Default: 32
  int history = 256;       // layer batches kept for the replay. Default: 256
  // The latency model. Default: unset = calibrate at Attach
  std::optional<ExpertLatencyModel> latency_model;
  CalibrationOptions calibration;  // how to calibrate. Default: CalibrationOptions{}
  int cpu_threads = 0;  // CpuExpertExecutor threads. Default: 0 = SY_NUM_THREADS or all cores
  bool log = true;      // one line to stderr at Attach. Default: true
};

class HotColdExpertProvider final : public MixedExpertProvider {
 public:
  explicit HotColdExpertProvider(HotColdOptions options = {}) : options_(std::move(options)) {}
  std::string name() const override { return "hot-cold"; }

  // After Install.
  const ExpertLatencyModel& latency_model() const { return latency_; }
  double alpha() const { return alpha_; }
  int tunings() const { return tunings_; }  // times alpha was re-tuned
  std::string Describe() const;
  // MixedExpertProvider's, plus the latency model (latency_transfer_ms, latency_cpu1_ms,
  // latency_device1_ms), alpha and alpha_tunings.
  std::map<std::string, double> extra_metrics() const override;

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  HotColdOptions options_;
  ExpertLatencyModel latency_;
  double alpha_ = 1.0;
  int tunings_ = 0;
  int64_t runs_ = 0;
  std::deque<std::vector<int64_t>> history_;  // the last options_.history layer batches
  std::vector<ExpertPlacement> placement_;    // scratch, per expert
};

}  // namespace sy::offload
