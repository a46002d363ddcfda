// PredictiveExpertProvider: the `predictive` expert policy (ProMoE; docs/offload.md, "The
// predictive policy"). A predictor (inference/offload/expert_predictor.h) guesses, from MoE layer
// m's input rows, the experts the gate of layer m + stride will choose; their copies start at once
// as LOW transfers. At layer m's gate:
//   - early preemption: every expert the gate chose goes to the TransferEngine as HIGH at once
//     (a queued LOW prediction of it is promoted), and the layer's LOW tasks still queued are
//     stale predictions and are dropped (TransferEngine::CancelLow(m));
//   - reordering: the experts run in order of readiness (most chunks on the device first, then
//     the order their copies were queued in), so compute runs while the rest are copied.
// The device cache (LRU by default) keeps experts across layers and steps; a prediction that hits
// refreshes its entry.
//
// Ablation switches (ProMoE's Figure 12, from the LRU baseline): PredictiveOptions::prefetch,
// early_preemption and reorder. All off is the LRU + fetch baseline (the gate's experts fetched
// one at a time in id order); prefetch alone adds the LOW predictions but fetches the gate's
// experts one at a time in id order, keeping stale predictions queued; + early_preemption; +
// reorder (the full policy, the default). Every combination computes the same outputs.
//
// Ownership: owns the host tier, the device cache, the transfer engine and (shared) the
// predictor. Thread-safety: as ExpertProvider (one thread, the compute stream's); the engine's
// worker runs beside it.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inference/expert_provider.h"
#include "inference/offload/device_expert_cache.h"
#include "inference/offload/expert_predictor.h"
#include "inference/offload/host_experts.h"
#include "inference/offload/transfer_engine.h"

namespace sy::offload {

struct PredictiveOptions {
  int num_slots = 8;                                         // device expert slots. Default: 8
  DeviceCachePolicy cache_policy = DeviceCachePolicy::kLru;  // Default: LRU (as ProMoE)
  // The skip-gate predictor's stride when `predictor` is null: 1 or 2. Default: 1
  int stride = 1;
  // Null: a SkipGatePredictor of `stride`, made from the model at Install. Default: null
  std::shared_ptr<const ExpertPredictor> predictor;
  bool prefetch = true;          // queue the predicted experts as LOW. Default: true
  bool early_preemption = true;  // at the gate: all HIGH at once, stale LOW dropped. Default: true
  bool reorder = true;           // run experts in readiness order. Default: true
};

class PredictiveExpertProvider final : public ExpertProvider {
 public:
  explicit PredictiveExpertProvider(PredictiveOptions options = {})
      : options_(std::move(options)) {}
  std::string name() const override { return "predictive"; }

  // After Install: the predictor in use, the device cache and the engine's counters.
  const ExpertPredictor& predictor() const { return *predictor_; }
  const DeviceExpertCache& cache() const { return *cache_; }
  TransferStats transfer_stats() const { return engine_->stats(); }
  // How much of each gate's choice had been predicted (layers with a prediction only).
  const PredictorAccuracy& predictor_accuracy() const { return accuracy_; }
  const PredictiveOptions& options() const { return options_; }
  // For `switchyard bench infer`: "predictor_accuracy" (when predictions are made),
  // "device_cache_hit_rate" (gate experts already on the device when the gate chose them),
  // "predictions_cancelled" and "promoted" (transfer tasks).
  std::map<std::string, double> extra_metrics() const override;
  // Blocks until no transfer is queued or in flight (stale predictions included), then refreshes
  // stats(): for a benchmark or test that counts every byte a policy moved.
  void DrainTransfers();

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status OnBeginStep(Backend& backend, const ExpertStep& step) override;
  Status OnEndStep(Backend& backend) override;
  Status Routed(Backend& backend, const MoeRouting& routing) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;

 private:
  struct Held {
    int32_t expert = 0;
    SlotHandle handle;
  };
  // Counts a gate request of `expert` of layer m (a hit when it is ready on the device).
  void CountGateRequest(int moe_index, int32_t expert);
  // Queues `expert` of layer m as HIGH into `held`; false (and OK) when every slot is pinned.
  Result<bool> EnqueueHigh(int moe_index, int32_t expert, std::vector<Held>& held);
  // Chunks of the held expert already on the device (0 .. 3).
  int ReadyChunks(const Held& held) const;
  // Orders `experts` by readiness, most ready first (stable).
  void SortByReadiness(int moe_index, std::vector<int32_t>& experts) const;
  void UpdateStats();

  PredictiveOptions options_;
  std::shared_ptr<const ExpertPredictor> predictor_;
  // Destroyed in reverse: the held pins before the engine before the cache before the host tier.
  std::shared_ptr<HostExpertSource> host_;
  std::unique_ptr<DeviceExpertCache> cache_;
  std::unique_ptr<TransferEngine> engine_;
  // Per MoE layer: the gate's experts queued HIGH at its gate (early preemption), until they run.
  std::vector<std::vector<Held>> held_;
  // Per MoE layer: the set predicted for it in this step, and whether there is one.
  std::vector<std::vector<int32_t>> predicted_;
  std::vector<bool> has_prediction_;
  PredictorAccuracy accuracy_;
  int64_t gate_requests_ = 0;  // gate experts asked for
  int64_t gate_hits_ = 0;      // of those, already ready on the device
};

}  // namespace sy::offload
