#include "launcher/convert/convert.h"

#include "launcher/convert/model_image.h"

namespace sy::convert {

Result<ConvertSummary> Convert(const ConvertOptions& options) {
  if (options.in.empty() || options.out.empty()) {
    return InvalidArgumentError("convert needs --in and --out");
  }
  if (options.dtype && *options.dtype != DType::kF32 && *options.dtype != DType::kBF16 &&
      *options.dtype != DType::kF16) {
    return InvalidArgumentError("--dtype must be f32, bf16 or f16");
  }
  SY_ASSIGN_OR_RETURN(const ModelFormat* from, DetectModelFormat(options.in));
  std::string to = options.to;
  if (to.empty()) {
    const bool h5 =
        options.out.size() > 3 && options.out.compare(options.out.size() - 3, 3, ".h5") == 0;
    to = h5 ? "native" : "hf";
  }
  SY_ASSIGN_OR_RETURN(const ModelFormat* writer, FindModelFormat(to));
  if (options.progress) {
    options.progress("reading " + options.in + " (" + std::string(from->name()) + ")");
  }
  Result<ModelImage> image = from->Read(options.in);
  if (!image.ok()) return image.status();
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
  write.shard_bytes = options.shard_bytes;
  write.progress = options.progress;
  SY_RETURN_IF_ERROR(writer->Write(*image, options.out, write));
  return summary;
}

}  // namespace sy::convert
