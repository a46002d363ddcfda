// `switchyard convert`: a model checkpoint into another format (launcher/convert/convert.h).
//
//   switchyard convert --in run/step-00000100.h5 --out export/ --to hf [--dtype bf16]
//                      [--shard-mib 4096]
//   switchyard convert --in hf-model/ --out model.h5 [--to native]
//   switchyard convert --in run/step-00000100.h5 --out model.gguf [--dtype q8_0]
// Formats: native (the HDF5 training checkpoint), hf (a Hugging Face directory) and gguf
// (llama.cpp's file); docs/formats.md.
#include <cstdio>
#include <string>

#include "launcher/command.h"
#include "launcher/convert/convert.h"

namespace sy::launcher {
namespace {

class ConvertCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--in", in_,
                   "Checkpoint to read: a step-*.h5 file, a checkpoint directory, "
                   "a Hugging Face model directory or a GGUF file")
        ->required();
    app.add_option("--out", out_, "Where to write; must not exist")->required();
    app.add_option("--to", to_,
                   "Output format: native, hf or gguf (default: native for *.h5, gguf for "
                   "*.gguf, else hf)");
    app.add_option("--dtype", dtype_,
                   "Dtype of the output's weights: f32, bf16 or f16; for gguf also q8_0 or q4_0 "
                   "(block-quantized matrices; vectors and routers stay f32) (default: the "
                   "input's)");
    app.add_option("--shard-mib", shard_mib_,
                   "Shard a Hugging Face output into files of at most this many MiB (default: "
                   "one file)")
        ->check(IntegerRange(1, 1 << 30));
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    convert::ConvertOptions options;
    options.in = in_;
    options.out = out_;
    options.to = to_;
    if (dtype_ == "q8_0" || dtype_ == "q4_0") {
      options.quantization = dtype_;
    } else if (!dtype_.empty()) {
      SY_ASSIGN_OR_RETURN(DType dtype, ParseDType(dtype_));
      options.dtype = dtype;
    }
    options.shard_bytes = static_cast<uint64_t>(shard_mib_) << 20;
    options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    SY_ASSIGN_OR_RETURN(convert::ConvertSummary done, convert::Convert(options));
    std::printf("converted %s (%s) -> %s (%s): %zu tensors\n", in_.c_str(), done.from.c_str(),
                out_.c_str(), done.to.c_str(), done.tensors);
    return Status::Ok();
  }

  std::string in_, out_, to_, dtype_;
  int64_t shard_mib_ = 0;
};

}  // namespace

SY_REGISTER_COMMAND("convert", "Convert a checkpoint between native, Hugging Face and GGUF formats",
                    ConvertCommand);

}  // namespace sy::launcher
