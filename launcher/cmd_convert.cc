// `switchyard convert`: a model checkpoint into another format (launcher/convert/convert.h).
//
//   switchyard convert --in run/step-00000100.h5 --out export/ --to hf [--dtype bf16]
//                      [--shard-mib 4096]
//   switchyard convert --in hf-model/ --out model.h5 [--to native]
//   switchyard convert --in run/step-00000100.h5 --out model.gguf [--dtype q8_0]
//   switchyard convert --in run/step-00000100.h5 --out run-ep4 --ep-size 4   (EP shards)
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
    ep_size_option_ = app.add_option(
        "--ep-size", ep_size_,
        "Write a native checkpoint laid out for N expert-parallel ranks: a directory "
        "of N shard files (the experts of rank i in shard i, the dense parameters in "
        "shard 0), or one consolidated file for 1; N must divide the experts per "
        "layer. `train --resume-from`, `generate` and `convert` read either");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    convert::ConvertOptions options;
    options.in = in_;
    options.out = out_;
    options.to = to_;
    SY_RETURN_IF_ERROR(convert::SetOutputDType(dtype_, &options));
    options.shard_bytes = static_cast<uint64_t>(shard_mib_) << 20;
    if (ep_size_option_->count() > 0) {
      if (ep_size_ < 1) {
        return InvalidArgumentError("--ep-size " + std::to_string(ep_size_) +
                                    " must be at least 1 (1 = one consolidated file)");
      }
      if (ep_size_ > (1 << 30)) {
        return InvalidArgumentError("--ep-size " + std::to_string(ep_size_) +
                                    " exceeds any expert count; choose a divisor of "
                                    "model.num_experts");
      }
      options.ep_size = static_cast<int>(ep_size_);
    }
    options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    SY_ASSIGN_OR_RETURN(convert::ConvertSummary done, convert::Convert(options));
    std::printf("converted %s (%s) -> %s (%s): %zu tensors\n", in_.c_str(), done.from.c_str(),
                out_.c_str(), done.to.c_str(), done.tensors);
    return Status::Ok();
  }

  std::string in_, out_, to_, dtype_;
  int64_t shard_mib_ = 0;
  int64_t ep_size_ = 0;
  CLI::Option* ep_size_option_ = nullptr;  // owned by the app; tells whether --ep-size was given
};

}  // namespace

SY_REGISTER_COMMAND("convert", "Convert a checkpoint between native, Hugging Face and GGUF formats",
                    ConvertCommand);

}  // namespace sy::launcher
