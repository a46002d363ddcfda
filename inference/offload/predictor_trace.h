// PredictorTraceRecorder: the `resident` expert policy plus a recorder of (hidden, gate) traces
// for `switchyard train-predictor` (inference/offload/expert_predictor.h). At every MoE layer's
// routing hook (ExpertProvider::Routed) it copies the layer's input rows [N, H] to the host and
// keeps the gate's top-k per row, so after a run, row r of every MoE layer is the same token and
// layer m's hidden row pairs with layer m + stride's choice.
//
// Ownership: as ResidentExpertProvider; owns the traces. Thread-safety: as ExpertProvider.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/offload/expert_predictor.h"
#include "inference/resident_expert_provider.h"

namespace sy::offload {

class PredictorTraceRecorder final : public ResidentExpertProvider {
 public:
  PredictorTraceRecorder() = default;
  std::string name() const override { return "resident"; }

  // The traces so far (shape fields set at Install).
  const PredictorTraces& traces() const { return traces_; }

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status Routed(Backend& backend, const MoeRouting& routing) override;

 private:
  PredictorTraces traces_;
};

}  // namespace sy::offload
