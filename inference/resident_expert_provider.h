// ResidentExpertProvider: the `resident` expert policy. Every expert stays on the device where
// the loader placed it, and each MoE layer's experts run through the model's own expert
// computation (LocalExpertCompute: grouped GEMMs over the stacked expert weights). Nothing moves
// between host and device, so stats() reports counts and zero bytes and stall.
//
// Ownership: owns the model's original expert computations after Install (which still view the
// model's parameters: the model must outlive the provider's use). Thread-safety: as
// ExpertProvider.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inference/expert_provider.h"

namespace sy {

class ResidentExpertProvider : public ExpertProvider {
 public:
  ResidentExpertProvider() = default;
  std::string name() const override { return "resident"; }

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                    std::span<const int64_t> group_rows, const Tensor& ys) override;
  void ReleaseLayer(int moe_index) override;

 private:
  ExpertCompute& Layer(int moe_index);

  std::vector<std::unique_ptr<ExpertCompute>> computes_;  // per MoE layer
};

}  // namespace sy
