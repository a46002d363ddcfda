#include "inference/offload/host_experts.h"

#include <string>

#include "runtime/core/check.h"

namespace sy::offload {
namespace {

const char* ParameterSuffix(ExpertChunk c) {
  switch (c) {
    case ExpertChunk::kGate:
      return "/w_gate";
    case ExpertChunk::kUp:
      return "/w_up";
    case ExpertChunk::kDown:
      return "/w_down";
  }
  return "";
}

}  // namespace

Result<ExpertLayout> ExpertLayoutOf(const MoeModel& model) {
  const ModelConfig& config = model.config();
  ExpertLayout layout;
  layout.num_layers = config.NumMoeLayers();
  layout.num_experts = config.num_experts;
  layout.hidden = config.hidden_size;
  layout.intermediate = config.moe_intermediate_size;
  layout.dtype = model.options().expert_dtype();
  if (!model.options().expert_layer_dtypes.empty()) {
    return InvalidArgumentError(
        "the model's experts: their dtypes differ between layers or matrices "
        "(ModelOptions::expert_layer_dtypes), and an offload layout holds one; load them in one "
        "dtype (--quantize experts --quant-type q8_0)");
  }
  SY_RETURN_IF_ERROR(layout.Validate().WithContext("the model's experts"));
  return layout;
}

Result<std::unique_ptr<HostExperts>> HostExperts::Create(Backend& backend,
                                                         const ExpertLayout& layout) {
  SY_RETURN_IF_ERROR(layout.Validate());
  std::vector<Tensor> layers;
  layers.reserve(layout.num_layers);
  for (int m = 0; m < layout.num_layers; ++m) {
    SY_ASSIGN_OR_RETURN(
        Tensor t, backend.AllocateHost(layout.dtype, Shape{layout.num_experts, kNumExpertChunks,
                                                           layout.chunk_numel()}));
    layers.push_back(std::move(t));
  }
  return std::unique_ptr<HostExperts>(new HostExperts(layout, std::move(layers)));
}

Result<std::unique_ptr<HostExperts>> HostExperts::FromModel(MoeModel& model) {
  SY_ASSIGN_OR_RETURN(ExpertLayout layout, ExpertLayoutOf(model));
  Backend& backend = model.backend();
  SY_ASSIGN_OR_RETURN(std::unique_ptr<HostExperts> host, Create(backend, layout));
  const ModelConfig& config = model.config();
  for (int layer = 0; layer < config.num_layers; ++layer) {
    const int m = config.MoeIndex(layer);
    if (m < 0) continue;
    for (int e = 0; e < layout.num_experts; ++e) {
      const std::string base =
          "experts/layer" + std::to_string(layer) + "/expert" + std::to_string(e);
      for (ExpertChunk c : kExpertChunks) {
        const Parameter* p = model.parameters().Find(base + ParameterSuffix(c));
        if (p == nullptr)
          return NotFoundError("the model has no parameter " + base + ParameterSuffix(c));
        const Tensor dst =
            host->chunk(ExpertKey{static_cast<uint32_t>(m), static_cast<uint32_t>(e)}, c);
        if (p->value.shape() != dst.shape() || p->value.dtype() != dst.dtype()) {
          return InvalidArgumentError(p->name + " is " + p->value.ToString() + ", expected " +
                                      dst.ToString());
        }
        backend.CopyAsync(p->value, dst, backend.compute_stream());
      }
    }
  }
  backend.SynchronizeStream(backend.compute_stream());
  return host;
}

Tensor HostExperts::chunk(ExpertKey key, ExpertChunk c) const {
  SY_CHECK(layout_.Contains(key)) << "HostExperts: " << key.ToString() << " is outside the layout";
  return layers_[key.layer]
      .Select(static_cast<int64_t>(key.expert))
      .Select(static_cast<int64_t>(c))
      .Reshape(layout_.ChunkShape(c));
}

Result<HostExpert> HostExperts::Get(ExpertKey key) {
  if (!layout_.Contains(key)) {
    return InvalidArgumentError("HostExperts::Get: " + key.ToString() + " is outside the layout (" +
                                std::to_string(layout_.num_layers) + " layers x " +
                                std::to_string(layout_.num_experts) + " experts)");
  }
  HostExpert expert;
  for (ExpertChunk c : kExpertChunks) expert.chunks[static_cast<int>(c)] = chunk(key, c);
  return expert;
}

}  // namespace sy::offload
