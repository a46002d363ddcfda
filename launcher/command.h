// Command: one `switchyard` subcommand. Each command lives in its own launcher/cmd_*.cc file and
// registers itself with SY_REGISTER_COMMAND; main.cc builds the CLI from the registry.
//
//   class TuneIoCommand : public Command { ... };
//   SY_REGISTER_COMMAND("tune-io", "Sweep block size x queue depth", TuneIoCommand);
//   SY_REGISTER_COMMAND("bench store", "...", BenchStoreCommand);   // nested: `switchyard bench
//   store`
//
// Configure() adds the command's options to its CLI11 subcommand; Run() does the work and returns
// the process exit code. A command reports user errors (a Status) with PrintError and returns 1;
// it never calls exit().
//
// Ownership: the registry owns one instance per command, created on demand.
// Thread-safety: registration happens during static initialisation; everything else runs on the
// main thread.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "inference/sampler.h"
#include "launcher/inference_session.h"
#include "runtime/core/status.h"

namespace sy::launcher {

class Command {
 public:
  virtual ~Command() = default;
  virtual void Configure(CLI::App& app) = 0;
  virtual int Run() = 0;
};

struct CommandEntry {
  std::string path;  // space-separated: "bench store"
  std::string help;
  std::function<std::unique_ptr<Command>()> make;
};

std::vector<CommandEntry>& CommandRegistry();

struct CommandRegistrar {
  CommandRegistrar(std::string path, std::string help,
                   std::function<std::unique_ptr<Command>()> make);
};

// Checks for numeric flags whose help and errors people read: "an integer from 1 to 4096", and
// "--batch: 0 is not an integer from 1 to 4096". Every numeric flag takes one: CLI11's own
// PositiveNumber and NonNegativeNumber print their bounds as doubles (309 digits).
CLI::Validator IntegerRange(int64_t min, int64_t max);
CLI::Validator NumberRange(double min, double max);

// --threads N: threads of the cpu backend (0: SY_NUM_THREADS, else every core).
void AddThreadsOption(CLI::App& app, int* threads);
// --json prints the command's figures as JSON on stdout, in place of its text; --json-out FILE
// also writes them to FILE (replacing it). Every command that reports figures (inspect, plan,
// perplexity, bench decode, bench infer, bench store, bench cache) takes both, the same way.
struct JsonOutput {
  bool print = false;
  std::string file;
};
void AddJsonOptions(CLI::App& app, JsonOutput* out);
// Writes `json_text` (one JSON document) to --json-out, and prints it when --json asks. Returns
// whether it was printed (then the caller's text goes to stderr, or nowhere).
Result<bool> EmitJson(const JsonOutput& out, const std::string& json_text);

// --temperature, --top-k, --top-p, -s/--seed: how `generate` and `chat` draw tokens.
void AddSamplingOptions(CLI::App& app, SamplerOptions* sampler);
// The sampling `generate` and `chat` start from: greedy (temperature 0) unless a flag says.
SamplerOptions GreedySampling();
// The context of a `generate` without --max-tokens and of a `chat`: -c when given (ctx_size > 0),
// else the model's own (`trained`, 0 when unknown) up to 4096 tokens, as llama.cpp's default -c.
int64_t OpenEndedContext(int64_t ctx_size, int64_t trained);
// --quantize none|experts and --quant-type q8_0|q4_0|q2_k..q6_k: the routed experts' dtype.
struct QuantizeFlags {
  std::string quantize;             // "", "none" or "experts"
  std::string quant_type = "q8_0";  // the block type of "experts"
};
void AddQuantizeOptions(CLI::App& app, QuantizeFlags* flags);
// The experts' dtype the flags ask for (LoadOptions::expert_dtype): unset without --quantize,
// `weight_dtype` with none, the --quant-type with experts.
Result<std::optional<DType>> ParseQuantizeFlags(const QuantizeFlags& flags, DType weight_dtype);

// The flags of AddInferenceOptions that are parsed after the command line is read.
struct InferenceFlags {
  std::string dtype = "auto";  // --dtype
  QuantizeFlags quantize;
};
// The flags of a command that opens a model for inference (InferenceSession): --model, --device,
// --dtype, --quantize, --quant-type, --threads, --policy and the policy's options, --pregate.
void AddInferenceOptions(CLI::App& app, InferenceOptions* options, InferenceFlags* flags);
// Sets options->weight_dtype and options->expert_dtype from `flags`; InvalidArgument naming the
// flag.
Status ParseInferenceFlags(const InferenceFlags& flags, InferenceOptions* options);
// --dtype of a command that loads `model_path`: "auto" (the model's own: config.json's
// torch_dtype, a GGUF's float type, f32 for a training checkpoint or when nothing says), f32, bf16
// or f16; InvalidArgument naming the flag otherwise.
Result<DType> WeightDTypeFlag(const std::string& dtype, const std::string& model_path);

// Prints "error: <status message>" to stderr.
void PrintError(const Status& status);
// The exit code of a command that ended with `status`: 0 when OK, else PrintError and 1.
int ExitCode(const Status& status);

}  // namespace sy::launcher

// __COUNTER__, not __LINE__: the unity build puts several command files in one translation
// unit, where two registrations may stand on the same line number.
#define SY_REGISTER_COMMAND(path, help, Type)                                         \
  static ::sy::launcher::CommandRegistrar SY_STATUS_CONCAT(sy_command_, __COUNTER__)( \
      path, help, [] { return std::unique_ptr<::sy::launcher::Command>(new Type()); })
