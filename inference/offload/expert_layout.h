// ExpertLayout: how the offload stack (inference/offload/, docs/offload.md) names and shapes the
// routed experts of a model.
//
// An expert is addressed by storage::ExpertKey {layer, expert}, where `layer` is the MoE layer
// index m (ModelConfig::MoeIndex, as ExpertProvider numbers layers), not the decoder layer. Each
// expert is split into three chunks, one per linear (ProMoE): gate [I, H], up [I, H] and
// down [H, I], in the Hugging Face Linear layout the model uses. Every chunk has I * H elements,
// so the chunks of all experts are the same size and a HIGH transfer waits at most one of them.
//
// Thread-safety: a value type.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "runtime/core/dtype.h"
#include "runtime/core/shape.h"
#include "runtime/core/status.h"
#include "storage/store/expert_key.h"

namespace sy::offload {

using storage::ExpertKey;
using storage::ExpertKeyHash;

enum class ExpertChunk : uint8_t { kGate = 0, kUp = 1, kDown = 2 };
inline constexpr int kNumExpertChunks = 3;
inline constexpr std::array<ExpertChunk, kNumExpertChunks> kExpertChunks = {
    ExpertChunk::kGate, ExpertChunk::kUp, ExpertChunk::kDown};

const char* ExpertChunkName(ExpertChunk chunk);  // "gate", "up", "down"

struct ExpertLayout {
  int num_layers = 0;        // MoE layers. Required, > 0
  int num_experts = 0;       // routed experts per MoE layer. Required, > 0
  int64_t hidden = 0;        // H. Required, > 0
  int64_t intermediate = 0;  // I (moe_intermediate_size). Required, > 0
  // Weight storage dtype: f32, bf16, f16, or quantized (q8_0, q4_0, a k-quant; hidden and
  // intermediate whole blocks), which moves and stores each expert in its blocks. Default: f32
  DType dtype = DType::kF32;

  // InvalidArgument naming the first bad field.
  Status Validate() const;
  bool Contains(ExpertKey key) const;
  // gate and up: [I, H]; down: [H, I].
  Shape ChunkShape(ExpertChunk chunk) const;
  int64_t chunk_numel() const { return hidden * intermediate; }
  size_t chunk_bytes() const { return DTypeBytes(dtype, chunk_numel()); }
  size_t expert_bytes() const { return kNumExpertChunks * chunk_bytes(); }
};

}  // namespace sy::offload
