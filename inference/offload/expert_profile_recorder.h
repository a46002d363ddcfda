// ExpertProfileRecorder: the `resident` expert policy plus a count of the tokens routed to each
// expert of each MoE layer (every token-slot the gate chose, before any capacity drop), for
// `switchyard profile`. Its profile() is the ExpertProfile (expert_profile.h) that the static
// placements read (`--profile`: the `static` device cache, cpu-compute, hot-cold's initial hot
// set).
//
// Ownership: as ResidentExpertProvider; owns the counts. Thread-safety: as ExpertProvider.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/offload/expert_profile.h"
#include "inference/resident_expert_provider.h"

namespace sy::offload {

class ExpertProfileRecorder final : public ResidentExpertProvider {
 public:
  ExpertProfileRecorder() = default;
  std::string name() const override { return "resident"; }

  // The counts so far ([MoE layers][experts], all zero at Install).
  const ExpertProfile& profile() const { return profile_; }

 protected:
  Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) override;
  Status Routed(Backend& backend, const MoeRouting& routing) override;

 private:
  ExpertProfile profile_;
};

}  // namespace sy::offload
