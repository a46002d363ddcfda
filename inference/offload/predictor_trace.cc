#include "inference/offload/predictor_trace.h"

#include <utility>

#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy::offload {

Status PredictorTraceRecorder::Attach(MoeModel& model,
                                      std::vector<std::unique_ptr<ExpertCompute>> computes) {
  const ModelConfig& config = model.config();
  traces_ = PredictorTraces{};
  traces_.num_layers = config.NumMoeLayers();
  traces_.num_experts = config.num_experts;
  traces_.top_k = config.top_k;
  traces_.hidden = config.hidden_size;
  traces_.h.resize(static_cast<size_t>(traces_.num_layers));
  traces_.experts.resize(static_cast<size_t>(traces_.num_layers));
  return ResidentExpertProvider::Attach(model, std::move(computes));
}

Status PredictorTraceRecorder::Routed(Backend& backend, const MoeRouting& routing) {
  const int m = routing.moe_index;
  SY_CHECK(m >= 0 && m < traces_.num_layers) << "MoE layer " << m;
  const ExpertRouting& r = *routing.routing;
  const int64_t n = r.h.defined() ? r.h.dim(0) : 0;
  if (n == 0) return Status::Ok();
  SY_CHECK_EQ(static_cast<int64_t>(r.slot_experts.size()), n * traces_.top_k) << "slot experts";
  SY_ASSIGN_OR_RETURN(std::vector<float> h, DownloadF32(backend, r.h));
  auto& hs = traces_.h[static_cast<size_t>(m)];
  hs.insert(hs.end(), h.begin(), h.end());
  auto& es = traces_.experts[static_cast<size_t>(m)];
  es.insert(es.end(), r.slot_experts.begin(), r.slot_experts.end());
  return Status::Ok();
}

}  // namespace sy::offload
