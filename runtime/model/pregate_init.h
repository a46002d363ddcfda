// Turning a conventional MoE checkpoint into a pre-gated one (Pre-gated MoE, ISCA'24, IV-B): the
// paper fine-tunes pre-gates starting from the pretrained model, and the natural starting point
// for the pre-gate in MoE layer m, which selects MoE layer m+1's experts, is MoE layer m+1's own
// gate.
//
//   pregated "layers/{L_m}/moe/pregate" <- conventional "layers/{L_(m+1)}/moe/gate"
//   every other pregated parameter       <- the conventional parameter of the same name
// (L_m is the decoder layer of MoE layer m). The conventional gates of MoE layers m >= 1 have no
// counterpart of their own in a pre-gated model: they live on as the pre-gates.
//
// Thread-safety: as the Backend's operators.
#pragma once

#include <string>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_store.h"

namespace sy {

// The name of the conventional parameter that initialises pre-gated parameter `name` (the name
// itself for everything but pre-gates). `pregated_config` is the pre-gated model's config.
std::string PregateSourceName(const ModelConfig& pregated_config, const std::string& name);

// Copies `conventional` (a model with pregate = false) into `pregated` (the same architecture with
// pregate = true) by PregateSourceName. Values are converted when the weight dtypes differ.
// InvalidArgument when a source is missing or its shape differs, naming the parameter.
Status InitPregatesFromGates(Backend& backend, const ParameterStore& conventional,
                             const ModelConfig& pregated_config, ParameterStore& pregated);

}  // namespace sy
