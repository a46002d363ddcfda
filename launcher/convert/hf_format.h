// The hf format: a Hugging Face model directory, as a ModelFormat (launcher/convert/model_image.h),
// for the five families of inference/hf_config.h.
//
// Read: config.json (ParseHfConfig) and model.safetensors or model.safetensors.index.json with
// its shards (storage/formats/safetensors.h: every bound checked, no shard outside the
// directory). Every parameter the config implies must be present under its HfTensorName with its
// shape, in F32, BF16 or F16; a tensor the architecture does not use is an error (a tied model's
// lm_head.weight and rotary inv_freq buffers excepted). The side files (kHfSideFiles) are kept.
//
// Write: a new directory `out`, staged as "<out>.tmp.<pid>" and renamed into place when complete:
//   config.json             HfConfigJson: the family's keys as transformers writes them
//   generation_config.json  the source's, or transformers' default from config.json's token ids
//   model.safetensors       or shards + model.safetensors.index.json above
//   WriteOptions::shard_bytes tokenizer files         the source's, when it has them
// Optimizer state has no place in a Hugging Face checkpoint and is left out (said in progress).
//
// Thread-safety: stateless; see ModelFormat.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "inference/hf_config.h"
#include "launcher/convert/model_image.h"

namespace sy::convert {

const ModelFormat& HfFormat();

// Files of a Hugging Face directory besides config and weights that conversion carries along.
inline constexpr std::array<std::string_view, 13> kHfSideFiles = {"config.json",
                                                                  "generation_config.json",
                                                                  "tokenizer.json",
                                                                  "tokenizer_config.json",
                                                                  "special_tokens_map.json",
                                                                  "tokenizer.model",
                                                                  "vocab.json",
                                                                  "merges.txt",
                                                                  "added_tokens.json",
                                                                  "chat_template.jinja",
                                                                  "chat_template.json",
                                                                  "configuration_deepseek.py",
                                                                  "modeling_deepseek.py"};

// The transformers release whose config.json keys HfConfigJson writes.
inline constexpr std::string_view kTransformersVersion = "4.49.0";

// The family a model exports as: `preferred` (the family it was read as) when the architecture
// fits it, else the first family that fits. Unimplemented naming each family's first mismatch
// (the feature with no Hugging Face counterpart) when none does.
Result<HfFamily> ChooseHfFamily(const ModelConfig& config, std::optional<HfFamily> preferred);

// config.json for `config` as `family`: every key transformers writes for that family. Keys of
// `original` (the config.json the model was read from, when of the same model_type) that do not
// describe the architecture keep their values (token ids, max_position_embeddings, ...); the
// others are transformers' defaults. `torch_dtype` is "float32", "bfloat16" or "float16".
Result<std::string> HfConfigJson(HfFamily family, const ModelConfig& config,
                                 const std::string& original, std::string_view torch_dtype);

}  // namespace sy::convert
