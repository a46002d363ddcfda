#include "launcher/convert/convert.h"

#include "launcher/convert/model_image.h"
#include "storage/hdf5/durable_replace.h"

namespace sy::convert {

Status SetOutputDType(const std::string& dtype, ConvertOptions* options) {
  if (dtype == "q8_0" || dtype == "q4_0") {
    options->quantization = dtype;
  } else if (!dtype.empty()) {
    SY_ASSIGN_OR_RETURN(options->dtype, ParseDType(dtype));
  }
  return Status::Ok();
}

Result<ConvertSummary> Convert(const ConvertOptions& options) {
  if (options.in.empty() || options.out.empty()) {
    return InvalidArgumentError("convert needs --in and --out");
  }
  if (options.dtype && *options.dtype != DType::kF32 && *options.dtype != DType::kBF16 &&
      *options.dtype != DType::kF16) {
    return InvalidArgumentError("--dtype must be f32, bf16 or f16");
  }
  std::string to = options.to;
  if (to.empty() && options.ep_size != 0) to = "native";
  if (to.empty()) {
    auto ends_with = [&](std::string_view suffix) {
      return options.out.size() > suffix.size() &&
             options.out.compare(options.out.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    to = ends_with(".h5") ? "native" : ends_with(".gguf") ? "gguf" : "hf";
  }
  SY_ASSIGN_OR_RETURN(const ModelFormat* writer, FindModelFormat(to));
  if (options.ep_size < 0) {
    return InvalidArgumentError("--ep-size " + std::to_string(options.ep_size) +
                                " must be at least 1 (1 = one consolidated file)");
  }
  if (options.ep_size != 0 && to != "native") {
    return InvalidArgumentError("--ep-size shards a native checkpoint by expert-parallel rank; " +
                                to + " has no such layout: drop --ep-size or write --to native");
  }
  if (!options.quantization.empty()) {
    if (options.dtype) return InvalidArgumentError("give either a float --dtype or a quantization");
    std::string offered;
    bool found = false;
    for (std::string_view q : writer->quantizations()) {
      found = found || q == options.quantization;
      offered += (offered.empty() ? "" : ", ") + std::string(q);
    }
    if (!found) {
      return InvalidArgumentError(
          "--dtype " + options.quantization + " is not a quantization of the " +
          std::string(writer->name()) + " format (" +
          (offered.empty() ? std::string("it has none; use f32, bf16 or f16") : offered) + ")");
    }
  }
  SY_ASSIGN_OR_RETURN(const ModelFormat* from, DetectModelFormat(options.in));
  if (options.progress) {
    options.progress("reading " + options.in + " (" + std::string(from->name()) + ")");
  }
  Result<ModelImage> image = from->Read(options.in);
  if (!image.ok()) return image.status();
  if (options.progress) {
    for (const std::string& note : image->notes) options.progress("note: " + note);
  }
  ConvertSummary summary;
  summary.from = from->name();
  summary.to = writer->name();
  summary.tensors = image->tensors.size();
  for (const ImageTensor& t : image->tensors) summary.bytes += t.bytes();
  if (options.progress) {
    options.progress("writing " + options.out + " (" + summary.to +
                     "): " + std::to_string(summary.tensors) + " tensors, " +
                     std::to_string(summary.bytes >> 20) + " MiB read");
  }
  WriteOptions write;
  write.dtype = options.dtype;
  write.quantization = options.quantization;
  write.shard_bytes = options.shard_bytes;
  write.ep_size = options.ep_size;
  write.progress = options.progress;
  // What a conversion to the same --out that was killed left behind (it never stands under the
  // final name, so it is only clutter).
  SY_ASSIGN_OR_RETURN(std::vector<std::string> stale, RemoveStaleTemporariesOf(options.out));
  for (const std::string& path : stale) {
    if (options.progress) options.progress("removed " + path + ", left by a killed conversion");
  }
  SY_RETURN_IF_ERROR(writer->Write(*image, options.out, write));
  return summary;
}

}  // namespace sy::convert
