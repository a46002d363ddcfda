// The host expert tier: where the transfer engine and the CPU executor read expert weights from.
//
// HostExpertSource is the interface: Get(key) returns host views of an expert's three chunks
// (inference/offload/expert_layout.h). The views keep the expert's host memory alive and
// unchanged while any of them lives, so a source backed by the storage ExpertCache (SSD store)
// holds its CacheHandle pin inside them (CachedHostExperts,
// inference/offload/cached_host_experts.h).
//
// HostExperts is the in-memory source: every expert of every MoE layer in pinned host memory
// (Backend::AllocateHost), one allocation per MoE layer laid out [expert][gate | up | down].
// The loader fills it through chunk(); FromModel copies a model's expert parameters into it.
//
// Ownership: HostExperts owns its memory; views from chunk() and Get() share it and may outlive
// the object. Thread-safety: Get and chunk are thread-safe (the object is read-only after it is
// filled); filling it races with readers and must finish before the first Get.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "inference/offload/expert_layout.h"
#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/model/moe_model.h"

namespace sy::offload {

// Host views of one expert's chunks, indexed by ExpertChunk; each has layout().ChunkShape(c).
struct HostExpert {
  std::array<Tensor, kNumExpertChunks> chunks;
  const Tensor& chunk(ExpertChunk c) const { return chunks[static_cast<int>(c)]; }
};

class HostExpertSource {
 public:
  virtual ~HostExpertSource() = default;
  virtual const ExpertLayout& layout() const = 0;
  // The expert's chunks in host memory. May block (a source backed by the SSD store reads it
  // in). InvalidArgument for a key outside layout().
  virtual Result<HostExpert> Get(ExpertKey key) = 0;
};

class HostExperts final : public HostExpertSource {
 public:
  // Pinned host memory for every expert of `layout`, from backend.AllocateHost; contents
  // uninitialised. InvalidArgument for a bad layout, ResourceExhausted when the host is full.
  static Result<std::unique_ptr<HostExperts>> Create(Backend& backend, const ExpertLayout& layout);
  // Copies the routed experts of every MoE layer of `model` (parameters
  // experts/layer{L}/expert{E}/{w_gate,w_up,w_down}, on model.backend()) into pinned host memory
  // of model.backend(), in the model's weight dtype. Synchronises the compute stream.
  static Result<std::unique_ptr<HostExperts>> FromModel(MoeModel& model);

  const ExpertLayout& layout() const override { return layout_; }
  Result<HostExpert> Get(ExpertKey key) override;
  // A host view of one chunk (the key must be in layout(), checked).
  Tensor chunk(ExpertKey key, ExpertChunk c) const;

 private:
  HostExperts(const ExpertLayout& layout, std::vector<Tensor> layers)
      : layout_(layout), layers_(std::move(layers)) {}

  ExpertLayout layout_;
  std::vector<Tensor> layers_;  // per MoE layer: [experts, chunks, I * H] pinned host memory
};

// The expert layout of a model's routed experts (InvalidArgument when it has no MoE layer).
Result<ExpertLayout> ExpertLayoutOf(const MoeModel& model);

}  // namespace sy::offload
