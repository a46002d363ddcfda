// The gguf format: llama.cpp's GGUF v3 file (storage/formats/gguf.h), as a ModelFormat
// (launcher/convert/model_image.h), for the five families of inference/gguf_model.h.
//
// Read: GgufCheckpoint (every bound checked, metadata -> config, experts unstacked and q/k rows
// unpermuted to the Hugging Face layout). Every parameter the metadata implies must be present
// with its shape; a tensor the architecture does not use is an error naming it. F32, F16 and BF16
// tensors are read as they are stored (lossless); F64, Q8_0, Q4_0 and Q4_K are dequantized to f32;
// any other type is an error naming the tensor. The image carries a config.json (HfConfigJson of
// the family and context length the metadata gives) so that gguf -> hf writes that family, and,
// for inspect, the file's own tensors (stacked, in their stored types) and every metadata key.
// Its tokenizer metadata (tokenizer.ggml.*, tokenizer.chat_template) comes as the Hugging Face
// files it stands for (GgufTokenizerFiles, inference/gguf_tokenizer.h: tokenizer.json or
// tokenizer.model, tokenizer_config.json), so gguf -> hf writes a tokenizer and gguf -> gguf the
// same keys again; a tokenizer it cannot run or read is left out with a note (ModelImage::notes).
//
// Write: one .gguf file at `out` through WriteGgufFromHf (temporary name, then rename), as the
// family the model exports as (ChooseHfFamily). Each tensor keeps its dtype (F32, F16, BF16) unless
// WriteOptions::dtype converts them all; quantization "q8_0" or "q4_0" stores every matrix whose
// rows are a multiple of 32 values in that block format (embeddings, attention, experts, dense and
// shared-expert MLPs, lm_head) and keeps vectors, routers and the shared-expert gate in F32, as
// llama.cpp's converter does. Optimizer state has no place in a GGUF and is left out (said in
// progress). The metadata is the model's (GgufModelMetadata, general.name "switchyard") and the
// tokenizer's (GgufTokenizerMetadata of the image's Hugging Face files); a GGUF source's other
// keys are not carried. Memory: the whole model is read before
// the file is written.
//
// Thread-safety: stateless; see ModelFormat.
#pragma once

#include "launcher/convert/model_image.h"

namespace sy::convert {

const ModelFormat& GgufFormat();

}  // namespace sy::convert
