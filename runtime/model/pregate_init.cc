#include "runtime/model/pregate_init.h"

#include <cstdio>

namespace sy {

std::string PregateSourceName(const ModelConfig& pregated_config, const std::string& name) {
  int layer = -1;
  int consumed = 0;
  if (std::sscanf(name.c_str(), "layers/%d/moe/pregate%n", &layer, &consumed) != 1 ||
      consumed != static_cast<int>(name.size())) {
    return name;
  }
  const int m = pregated_config.MoeIndex(layer);
  if (m < 0) return name;
  // The decoder layer of MoE layer m + 1.
  for (int next = layer + 1; next < pregated_config.num_layers; ++next) {
    if (pregated_config.MoeIndex(next) == m + 1) {
      return "layers/" + std::to_string(next) + "/moe/gate";
    }
  }
  return name;
}

Status InitPregatesFromGates(Backend& backend, const ParameterStore& conventional,
                             const ModelConfig& pregated_config, ParameterStore& pregated) {
  if (!pregated_config.pregate) {
    return InvalidArgumentError("InitPregatesFromGates: the target config has pregate = false");
  }
  for (Parameter& dst : pregated) {
    const std::string source_name = PregateSourceName(pregated_config, dst.name);
    const Parameter* src = conventional.Find(source_name);
    if (src == nullptr) {
      return InvalidArgumentError("InitPregatesFromGates: " + dst.name + " needs " + source_name +
                                  ", which the conventional model does not have");
    }
    if (src->value.shape() != dst.value.shape()) {
      return InvalidArgumentError("InitPregatesFromGates: " + dst.name + " is " +
                                  dst.value.shape().ToString() + " but " + source_name + " is " +
                                  src->value.shape().ToString());
    }
    if (src->value.dtype() == dst.value.dtype()) {
      backend.CopyAsync(src->value, dst.value, backend.compute_stream());
    } else {
      backend.Convert(src->value, dst.value);
    }
  }
  backend.SynchronizeStream(backend.compute_stream());
  return Status::Ok();
}

}  // namespace sy
