#include "inference/offload/expert_layout.h"

#include <string>

namespace sy::offload {

const char* ExpertChunkName(ExpertChunk chunk) {
  switch (chunk) {
    case ExpertChunk::kGate:
      return "gate";
    case ExpertChunk::kUp:
      return "up";
    case ExpertChunk::kDown:
      return "down";
  }
  return "?";
}

Status ExpertLayout::Validate() const {
  if (num_layers <= 0) return InvalidArgumentError("ExpertLayout.num_layers must be > 0");
  if (num_experts <= 0) return InvalidArgumentError("ExpertLayout.num_experts must be > 0");
  if (hidden <= 0) return InvalidArgumentError("ExpertLayout.hidden must be > 0");
  if (intermediate <= 0) return InvalidArgumentError("ExpertLayout.intermediate must be > 0");
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16 &&
      !IsQuantized(dtype)) {
    return InvalidArgumentError(
        "ExpertLayout.dtype is " + std::string(DTypeName(dtype)) +
        ", expected f32, bf16, f16, q8_0, q4_0, q2_k, q3_k, q4_k, q5_k or q6_k");
  }
  if (hidden % DTypeBlockSize(dtype) != 0 || intermediate % DTypeBlockSize(dtype) != 0) {
    return InvalidArgumentError("ExpertLayout: hidden " + std::to_string(hidden) +
                                " and intermediate " + std::to_string(intermediate) +
                                " must be whole " + std::string(DTypeName(dtype)) + " blocks of " +
                                std::to_string(DTypeBlockSize(dtype)));
  }
  return Status::Ok();
}

bool ExpertLayout::Contains(ExpertKey key) const {
  return key.layer < static_cast<uint32_t>(num_layers) &&
         key.expert < static_cast<uint32_t>(num_experts);
}

Shape ExpertLayout::ChunkShape(ExpertChunk chunk) const {
  switch (chunk) {
    case ExpertChunk::kGate:
    case ExpertChunk::kUp:
      return Shape{intermediate, hidden};
    case ExpertChunk::kDown:
      return Shape{hidden, intermediate};
  }
  return Shape{};
}

}  // namespace sy::offload
