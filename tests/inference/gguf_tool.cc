// Test driver for the GGUF model code (inference/gguf_model.h), used by gguf_oracle.py until
// `switchyard convert` exists:
//   gguf_tool export HF_DIR OUT.gguf [f32|f16|bf16|q8_0|q4_0]   ExportHfDirToGguf
//   gguf_tool rewrite IN.gguf OUT.gguf     read, then write what was read (metadata, tensors)
//   gguf_tool check-hf IN.gguf HF_DIR      every tensor of the GGUF seen as HF (ReadRaw) equals
//                                          the safetensors tensor byte for byte, same name set
//   gguf_tool dump IN.gguf GGUF_TENSOR OUT.f32   the tensor dequantized to raw f32
// Exit status 0 on success; the error on stderr otherwise.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "inference/gguf_model.h"
#include "storage/formats/ggml_quants.h"
#include "storage/formats/gguf_writer.h"
#include "storage/formats/safetensors.h"

namespace sy {
namespace {

Status Export(const std::string& dir, const std::string& out, const std::string& type) {
  GgufExportOptions options;
  if (type == "f32") options.type = storage::GgmlType::kF32;
  if (type == "f16") options.type = storage::GgmlType::kF16;
  if (type == "bf16") options.type = storage::GgmlType::kBF16;
  if (type == "q8_0") options.type = storage::GgmlType::kQ8_0;
  if (type == "q4_0") options.type = storage::GgmlType::kQ4_0;
  return ExportHfDirToGguf(dir, out, options);
}

Status Rewrite(const std::string& in, const std::string& out) {
  SY_ASSIGN_OR_RETURN(auto file, storage::GgufFile::Open(in));
  std::vector<storage::GgufTensorToWrite> tensors;
  for (const storage::GgufTensorInfo& t : file->header().tensors) {
    tensors.push_back({t.name, t.type, t.ne, file->Data(t), {}});
  }
  return storage::WriteGguf(out, file->header().metadata, tensors);
}

Status CheckHf(const std::string& gguf, const std::string& dir) {
  SY_ASSIGN_OR_RETURN(auto ck, GgufCheckpoint::Open(gguf));
  SY_ASSIGN_OR_RETURN(auto st, storage::SafetensorsCheckpoint::Open(dir));
  std::vector<std::string> want = st->TensorNames();
  if (ck->config().config.tie_word_embeddings) {
    std::erase(want, std::string("lm_head.weight"));
  }
  if (ck->TensorNames() != want) {
    return DataLossError("the GGUF's tensors, seen as HF names, differ from " + dir + "'s");
  }
  for (const std::string& name : want) {
    SY_ASSIGN_OR_RETURN(storage::TensorBytes t, st->Get(name));
    SY_ASSIGN_OR_RETURN(std::vector<uint8_t> raw, ck->ReadRaw(name));
    SY_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ck->Shape(name));
    if (shape != t.info->shape || raw.size() != t.bytes.size() ||
        std::memcmp(raw.data(), t.bytes.data(), raw.size()) != 0) {
      return DataLossError("tensor \"" + name + "\" differs after HF -> GGUF -> HF");
    }
  }
  std::printf("%zu tensors equal\n", want.size());
  return Status::Ok();
}

Status Dump(const std::string& gguf, const std::string& tensor, const std::string& out) {
  SY_ASSIGN_OR_RETURN(auto file, storage::GgufFile::Open(gguf));
  SY_ASSIGN_OR_RETURN(const storage::GgufTensorInfo* t, file->Tensor(tensor));
  std::vector<float> values(static_cast<size_t>(t->numel()));
  SY_RETURN_IF_ERROR(storage::DequantizeToF32(t->type, file->Data(*t), values));
  std::ofstream f(out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(values.data()),
          static_cast<std::streamsize>(values.size() * sizeof(float)));
  return f ? Status::Ok() : IOError("cannot write " + out);
}

Status Run(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() >= 3 && a[0] == "export") return Export(a[1], a[2], a.size() > 3 ? a[3] : "");
  if (a.size() == 3 && a[0] == "rewrite") return Rewrite(a[1], a[2]);
  if (a.size() == 3 && a[0] == "check-hf") return CheckHf(a[1], a[2]);
  if (a.size() == 4 && a[0] == "dump") return Dump(a[1], a[2], a[3]);
  return InvalidArgumentError("usage: gguf_tool export|rewrite|check-hf|dump ...");
}

}  // namespace
}  // namespace sy

int main(int argc, char** argv) {
  const sy::Status s = sy::Run(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
