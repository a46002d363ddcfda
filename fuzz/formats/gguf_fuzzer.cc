// libFuzzer target for the GGUF reader (storage/formats/gguf.h): any input must parse or give a
// Status. Whatever parses must satisfy the format's invariants: tensors in order, aligned, each
// of its type's size, inside the image; and writing what was parsed must give a file that parses
// to the same header (the writer's own checks accept everything the reader accepts).
// With ICU (SY_FUZZ_GGUF_TOKENIZER) the tokenizer metadata is read too
// (inference/gguf_tokenizer.h): GgufTokenizerFiles must accept or refuse with a Status; a
// tokenizer.json it writes must parse, and the tokenizer must encode a text into ids of its
// vocabulary that decode without error; its tokenizer_config.json must be JSON.
// The model metadata is read too (inference/gguf_model_config.h): ParseGgufModelConfig must
// return a config that validates, or a Status with a message.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "inference/gguf_model_config.h"
#include "storage/formats/ggml_quants.h"
#include "storage/formats/gguf.h"
#include "storage/formats/text_file.h"
#if SY_FUZZ_GGUF_TOKENIZER
#include "inference/gguf_tokenizer.h"
#include "inference/tokenizer.h"

namespace {

void CheckTokenizer(const sy::storage::GgufHeader& header) {
  sy::Result<std::map<std::string, std::string>> files =
      sy::GgufTokenizerFiles(header, "fuzz.gguf");
  if (!files.ok()) return;
  if (const auto config = files->find("tokenizer_config.json"); config != files->end()) {
    if (!sy::storage::ParseStrictJson(config->second, "fuzz", "tokenizer_config.json").ok()) {
      __builtin_trap();
    }
  }
  const auto json = files->find("tokenizer.json");
  if (json == files->end()) return;
  auto tok = sy::ParseHfTokenizerJson(json->second, "fuzz.gguf");
  if (!tok.ok()) __builtin_trap();  // what GgufTokenizerFiles validated must load
  auto ids = (*tok)->Encode("Hello w\xC3\xB6rld 123 <s>\n\n");
  if (!ids.ok()) return;  // a vocabulary without every byte refuses some texts
  for (const int32_t id : *ids) {
    if (id < 0 || id >= (*tok)->vocab_size()) __builtin_trap();
  }
  if (!(*tok)->Decode(*ids).ok()) __builtin_trap();
}

}  // namespace
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sy::storage;
  sy::Result<GgufHeader> header = ParseGgufImage({data, size}, "fuzz.gguf");
  if (!header.ok()) return 0;
  if (header->alignment == 0 || (header->alignment & (header->alignment - 1)) != 0) {
    __builtin_trap();
  }
  uint64_t expected = 0;
  for (const GgufTensorInfo& t : header->tensors) {
    if (t.ne.empty() || t.ne.size() > kGgufMaxDims) __builtin_trap();
    if (t.offset != expected || t.offset % header->alignment != 0) __builtin_trap();
    if (header->data_offset + t.offset + t.bytes > size) __builtin_trap();
    if (header->FindTensor(t.name) != &t) __builtin_trap();
    expected =
        t.offset + t.bytes + (header->alignment - t.bytes % header->alignment) % header->alignment;
    // Small convertible tensors go through the dequantizer, which must accept them.
    if (GgmlTypeConvertsToF32(t.type) && t.numel() <= 4096) {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      const sy::Status s = DequantizeToF32(
          t.type, {data + header->data_offset + t.offset, static_cast<size_t>(t.bytes)}, out);
      if (!s.ok()) __builtin_trap();
    }
  }
  // The model metadata: a config or an error naming the key; a config it returns is valid.
  sy::Result<sy::HfModelConfig> config = sy::ParseGgufModelConfig(*header, "fuzz.gguf");
  if (config.ok() && !config->config.Validate().ok()) __builtin_trap();
  if (!config.ok() && config.status().message().empty()) __builtin_trap();
#if SY_FUZZ_GGUF_TOKENIZER
  CheckTokenizer(*header);
#endif
  return 0;
}
