// ExpertProvider: how an inference run gets the routed experts of every MoE layer computed. The
// non-expert weights live on the device; the experts sit behind this interface, and each offload
// policy (docs/inference.md, "Expert providers") is one implementation of it.
//
// Call order within one forward step of KvCacheDecoder (the provider's whole view of a run):
//   BeginStep({num_tokens, prefill})
//   for each MoE layer m, in order:
//     Routed(m, routing)                 the layer input [N, H], each slot's expert, the rows per
//                                        expert, and (pre-gated models) MoE layer m + 1's routing
//                                        logits [N, E], known now, before layer m's experts run
//     RunExperts(m, xs, group_rows, ys)  rows grouped by expert, as ExpertCompute::Forward
//     ReleaseLayer(m)                    the layer's activations may go
//   EndStep()
// A policy that fetches on demand does its fetching in RunExperts; one that prefetches starts the
// copies for layer m + 1 in Routed(m) (pre-gated) or RunExperts(m) (all of layer m + 1) and waits
// for them in RunExperts(m + 1).
//
// Install(model) puts an adapter in front of every MoE layer (MoeLayer::set_expert_compute): the
// adapter's Routed/Forward call this provider's Routed/RunExperts, so MoeModel::Forward on an
// installed model runs through the provider too (without the step hooks unless its caller adds
// them). The expert computations the model was built with (the experts the loader placed on the
// device) are handed to Attach, once; a provider may keep, use or drop them.
//
// Ownership: the provider owns what Attach gave it; the model's layers hold adapters that point at
// the provider, so the provider must outlive every forward pass of the model it is installed on.
// Thread-safety: one thread at a time, the thread that drives the backend's compute stream.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inference/offload/host_experts.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/expert_compute.h"
#include "runtime/model/moe_model.h"

namespace sy {

// One forward step of the decoder.
struct ExpertStep {
  int64_t num_tokens = 0;  // rows through every layer in this step
  bool prefill = false;    // a prompt's prefill (or any multi-token continuation); false: decode
};

// What MoE layer `moe_index` routed (ExpertRouting, plus where the layer is).
struct MoeRouting {
  int moe_index = 0;  // the MoE layer, 0 .. NumMoeLayers() - 1
  int layer = 0;      // its decoder layer
  const ExpertRouting* routing = nullptr;
};

// Counters since Install. Counted for every provider: experts_run, rows, layer_runs.
// Set by the policy: bytes_host_to_device, stall_seconds (0 for the resident provider).
struct ExpertProviderStats {
  int64_t steps = 0;                 // BeginStep calls
  int64_t layer_runs = 0;            // RunExperts calls
  int64_t experts_run = 0;           // (layer, expert) pairs with at least one row
  int64_t rows = 0;                  // rows computed (token-slots after the capacity drop)
  int64_t bytes_host_to_device = 0;  // expert weight bytes moved host -> device
  double stall_seconds = 0.0;        // time the compute stream waited for expert weights
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  ExpertProvider(const ExpertProvider&) = delete;
  ExpertProvider& operator=(const ExpertProvider&) = delete;

  // The policy's name, as `switchyard generate --policy` spells it.
  virtual std::string name() const = 0;

  // Replaces every MoE layer's ExpertCompute of `model` by an adapter to this provider and hands
  // the replaced ones to Attach. FailedPrecondition when this provider is installed already or
  // the model already runs through a provider.
  Status Install(MoeModel& model);
  // The model Install succeeded on, or null.
  const MoeModel* model() const { return model_; }

  // Before and after every forward step of KvCacheDecoder (BeginStep counts stats().steps).
  Status BeginStep(Backend& backend, const ExpertStep& step);
  Status EndStep(Backend& backend);

  const ExpertProviderStats& stats() const { return stats_; }
  // Policy-specific figures since Install, by name, for `switchyard bench infer` (which reports
  // every one). Names it shows in its table: "device_cache_hit_rate" (0..1; without it, bench
  // infer derives the rate from bytes moved), "predictor_accuracy" (0..1, predicted experts the
  // gate then chose). Default: none.
  virtual std::map<std::string, double> extra_metrics() const { return {}; }

  // The host tier the experts come from, set before Install when they are not (only) on the
  // device: a loader that kept them on the host, or the SSD/PMem store behind a host cache.
  // Unset: a policy that needs a host tier copies the model's experts (HostTier).
  void set_host_experts(std::shared_ptr<offload::HostExpertSource> host) {
    host_experts_ = std::move(host);
  }

 protected:
  ExpertProvider() = default;
  // Called once by Install: `computes[m]` is MoE layer m's expert computation as the model was
  // built (LocalExpertCompute over the experts on the device, for a loaded model).
  virtual Status Attach(MoeModel& model, std::vector<std::unique_ptr<ExpertCompute>> computes) = 0;
  // The step hooks. Default: nothing.
  virtual Status OnBeginStep(Backend& backend, const ExpertStep& step);
  virtual Status OnEndStep(Backend& backend);
  // After MoE layer routing.moe_index routed, before its experts run. Default: nothing.
  virtual Status Routed(Backend& backend, const MoeRouting& routing);
  // xs [R, H]: rows grouped by expert, group_rows[e] for expert e (sum R); ys [R, H] overwritten
  // with the experts' outputs, on the compute stream. Once per MoE layer per forward.
  virtual Status RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                            std::span<const int64_t> group_rows, const Tensor& ys) = 0;
  // MoE layer `moe_index` is done with this forward's activations (MoeLayer::Release). Default:
  // nothing.
  virtual void ReleaseLayer(int moe_index);
  // For the policy's bytes_host_to_device and stall_seconds.
  ExpertProviderStats& mutable_stats() { return stats_; }
  // The host tier for a policy that fetches or runs experts on the host: the one given to
  // set_host_experts, else `model`'s experts copied once to pinned host memory
  // (HostExperts::FromModel; later calls return the same copy).
  Result<std::shared_ptr<offload::HostExpertSource>> HostTier(MoeModel& model);

 private:
  friend class ProviderExpertCompute;
  const MoeModel* model_ = nullptr;
  ExpertProviderStats stats_;
  std::shared_ptr<offload::HostExpertSource> host_experts_;
};

}  // namespace sy
