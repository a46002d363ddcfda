// `switchyard bench decode`: CPU decode tokens/s at batch 1, as achieved memory bandwidth next to
// the machine's bandwidth measured in the same run (inference/tools/decode_bench.h says what is
// measured and how).
//
//   switchyard bench decode --model DIR [--prompt-len P --gen-len G --warmup W --threads T
//                           --dtype auto --stream-mib M --stream-repeats R --seed S --json FILE]
#include <cstdio>
#include <string>

#include "inference/tools/decode_bench.h"
#include "launcher/command.h"
#include "runtime/core/file_creation.h"

namespace sy::launcher {
namespace {

class BenchDecodeCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", options_.model_dir,
                   "Hugging Face model directory (config.json + safetensors) or GGUF file")
        ->required();
    app.add_option("--prompt-len", options_.prompt_len,
                   "Prompt tokens prefilled first (default 16)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--gen-len", options_.gen_len, "Timed greedy decode steps (default 32)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--warmup", options_.warmup, "Untimed decode steps before them (default 2)")
        ->check(IntegerRange(0, 1 << 20));
    AddThreadsOption(app, &options_.threads);
    app.add_option("--dtype", dtype_,
                   "Weight dtype: auto (the model's torch_dtype or GGUF type), f32, bf16, f16 "
                   "(default auto)");
    AddQuantizeOptions(app, &quantize_);
    app.add_option("--stream-mib", options_.stream_mib,
                   "Read array of the bandwidth probe in MiB; the copy uses two of half that. "
                   "Make it several times the last-level cache (default 1024)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--stream-repeats", options_.stream_repeats,
                   "Timed passes per probe (default 5)")
        ->check(IntegerRange(1, 1000));
    app.add_option("--seed", options_.seed, "Seed of the random prompt ids (default 0)")
        ->check(IntegerRange(0, UINT32_MAX));
    AddJsonOptions(app, &json_);
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_ASSIGN_OR_RETURN(options_.dtype, WeightDTypeFlag(dtype_, options_.model_dir));
    SY_ASSIGN_OR_RETURN(options_.expert_dtype, ParseQuantizeFlags(quantize_, options_.dtype));
    options_.keep_quantized_matrices = quantize_.quantize.empty();
    SY_ASSIGN_OR_RETURN(DecodeBenchResult result, RunDecodeBench(options_));
    SY_ASSIGN_OR_RETURN(const bool printed, EmitJson(json_, result.json.dump(2)));
    std::fputs(result.report.c_str(), printed ? stderr : stdout);
    return Status::Ok();
  }

  DecodeBenchOptions options_;
  std::string dtype_ = "auto";
  QuantizeFlags quantize_;
  JsonOutput json_;
};

}  // namespace

SY_REGISTER_COMMAND("bench decode",
                    "CPU decode tokens/s at batch 1 as weight bandwidth, beside a STREAM-like "
                    "read and copy",
                    BenchDecodeCommand);

}  // namespace sy::launcher
