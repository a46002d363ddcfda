#include "inference/expert_provider.h"

#include <utility>

#include "runtime/core/check.h"

namespace sy {

// The ExpertCompute that MoeLayer calls once a provider is installed: it forwards to the provider,
// naming the layer, and counts what ran. Forward only: inference models have no gradients.
class ProviderExpertCompute final : public ExpertCompute {
 public:
  ProviderExpertCompute(ExpertProvider& provider, int moe_index, int layer)
      : provider_(provider), moe_index_(moe_index), layer_(layer) {}

  Status Routed(Backend& backend, const ExpertRouting& routing) override {
    return provider_.Routed(
        backend, MoeRouting{.moe_index = moe_index_, .layer = layer_, .routing = &routing});
  }

  Status Forward(Backend& backend, const Tensor& xs, std::span<const int64_t> group_rows,
                 const Tensor& ys) override {
    ExpertProviderStats& stats = provider_.stats_;
    ++stats.layer_runs;
    for (const int64_t rows : group_rows) {
      stats.experts_run += rows > 0 ? 1 : 0;
      stats.rows += rows;
    }
    return provider_.RunExperts(backend, moe_index_, xs, group_rows, ys);
  }

  Status Backward(Backend& backend, const Tensor& d_ys, const Tensor& d_xs) override {
    (void)backend;
    (void)d_ys;
    (void)d_xs;
    return FailedPreconditionError("an expert provider (" + provider_.name() +
                                   ") runs inference only: it has no backward");
  }

  void Release() override { provider_.ReleaseLayer(moe_index_); }

 private:
  ExpertProvider& provider_;
  int moe_index_;
  int layer_;
};

Status ExpertProvider::Install(MoeModel& model) {
  if (model_ != nullptr) {
    return FailedPreconditionError("expert provider '" + name() + "' is installed already");
  }
  const ModelConfig& config = model.config();
  for (int m = 0; m < config.NumMoeLayers(); ++m) {
    if (dynamic_cast<ProviderExpertCompute*>(&model.moe_layer(m).expert_compute()) != nullptr) {
      return FailedPreconditionError("the model runs through another expert provider already");
    }
  }
  std::vector<std::unique_ptr<ExpertCompute>> computes;
  for (int l = 0; l < config.num_layers; ++l) {
    const int m = config.MoeIndex(l);
    if (m < 0) continue;
    computes.push_back(model.moe_layer(m).set_expert_compute(
        std::make_unique<ProviderExpertCompute>(*this, m, l)));
  }
  model_ = &model;
  return Attach(model, std::move(computes));
}

Status ExpertProvider::BeginStep(Backend& backend, const ExpertStep& step) {
  SY_CHECK(model_ != nullptr) << "ExpertProvider::BeginStep before Install";
  ++stats_.steps;
  return OnBeginStep(backend, step);
}

Status ExpertProvider::EndStep(Backend& backend) { return OnEndStep(backend); }

Status ExpertProvider::OnBeginStep(Backend& backend, const ExpertStep& step) {
  (void)backend;
  (void)step;
  return Status::Ok();
}

Status ExpertProvider::OnEndStep(Backend& backend) {
  (void)backend;
  return Status::Ok();
}

Status ExpertProvider::Routed(Backend& backend, const MoeRouting& routing) {
  (void)backend;
  (void)routing;
  return Status::Ok();
}

void ExpertProvider::ReleaseLayer(int moe_index) { (void)moe_index; }

Result<std::shared_ptr<offload::HostExpertSource>> ExpertProvider::HostTier(MoeModel& model) {
  if (host_experts_ == nullptr) {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<offload::HostExperts> copy,
                        offload::HostExperts::FromModel(model));
    host_experts_ = std::move(copy);
  }
  return host_experts_;
}

}  // namespace sy
