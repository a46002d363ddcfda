// `switchyard bench infer`: expert policies side by side on one model, one device setting and the
// same prompts; every policy's greedy tokens checked against resident's (inference/tools/
// infer_bench.h says what is measured and how).
//
//   switchyard bench infer --model DIR --policies resident,ondemand,... [--prompt-len P
//       --gen-len G --batch B --device sim --link-gbps X --link-latency-us U --device-mem BYTES
//       --device-slots N --device-cache lru --store uring:PATH --host-cache-experts N
//       --dtype auto --repeats R --seed S --threads T --json FILE --plot DIR]
#include <cstdio>
#include <string>

#include "inference/tools/infer_bench.h"
#include "inference/tools/infer_bench_charts.h"
#include "launcher/command.h"
#include "runtime/core/file_creation.h"

namespace sy::launcher {
namespace {

class BenchInferCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", options_.model_dir,
                   "Hugging Face model directory (config.json + safetensors)")
        ->required();
    app.add_option("--policies", options_.policies,
                   "Expert policies, comma-separated (" + ExpertPolicyList() +
                       "); resident is the reference and always runs (default resident,ondemand)");
    app.add_option("--prompt-len", options_.prompt_len, "Prompt tokens per sequence (default 16)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--gen-len", options_.gen_len,
                   "Tokens generated per sequence, the first from the prefill (default 16)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--batch", options_.batch, "Sequences decoded together (default 1)")
        ->check(IntegerRange(1, 4096));
    app.add_option("--device", options_.device, "cpu, sim or cuda:N (default sim)");
    app.add_option("--link-gbps", options_.sim.link_gbps,
                   "sim: host <-> device link GB/s each way (default 25, PCIe 4.0 x16)")
        ->check(NumberRange(0.001, 100000));
    app.add_option("--link-latency-us", options_.sim.link_latency_us,
                   "sim: latency per copy in us (default 10)")
        ->check(NumberRange(0, 1e6));
    app.add_option("--device-mem", options_.sim.memory_bytes,
                   "sim: device memory budget in bytes (default 8 GiB)")
        ->check(IntegerRange(1, int64_t{1} << 50));
    app.add_option("--device-slots", options_.policy_options.device_slots,
                   "Device expert slots for the policies that take them (default: each "
                   "policy's own)")
        ->check(IntegerRange(0, 1 << 20));
    app.add_option("--device-cache", options_.policy_options.device_cache,
                   "Device cache policy of the slots: none, lru, lfu, lifo, layer-lru, static "
                   "(default: each policy's own)");
    app.add_option("--profile", options_.policy_options.profile,
                   "Expert popularity profile (JSON)");
    app.add_option("--predictor", options_.policy_options.predictor,
                   "predictive: predictor file from `switchyard train-predictor`");
    app.add_option("--store", options_.store,
                   "Serve the experts from the expert store: uring:PATH, pmem:PATH or "
                   "posix:PATH (written from the model when PATH is absent, reused otherwise)");
    app.add_option("--host-cache-experts", options_.host_cache_experts,
                   "With --store: host cache slots, in experts (default: two MoE layers' worth)")
        ->check(IntegerRange(0, 1 << 24));
    app.add_flag("--pregate", options_.pregate,
                 "Load the checkpoint as a pre-gated model (MoE layer m's pre-gate = layer m+1's "
                 "gate), for the pregated policy; every policy then runs that model");
    app.add_option("--dtype", dtype_,
                   "Weight dtype: auto (the model's torch_dtype), f32, bf16, f16 (default auto)");
    AddQuantizeOptions(app, &quantize_);
    app.add_option("--repeats", options_.repeats,
                   "Timed runs per policy; times are medians (default 1)")
        ->check(IntegerRange(1, 1000));
    app.add_option("--seed", options_.seed, "Seed of the random prompt ids (default 0)")
        ->check(IntegerRange(0, UINT32_MAX));
    AddThreadsOption(app, &options_.threads);
    AddJsonOptions(app, &json_);
    app.add_option("--plot", plot_,
                   "Also draw the policies' tokens/s and cache hit rates as bar charts (PNG and "
                   "SVG) into this directory");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_ASSIGN_OR_RETURN(DType dtype, WeightDTypeFlag(dtype_, options_.model_dir));
    options_.dtype = std::string(DTypeName(dtype));
    SY_ASSIGN_OR_RETURN(std::optional<DType> experts, ParseQuantizeFlags(quantize_, dtype));
    options_.expert_dtype = experts ? std::string(DTypeName(*experts)) : "";
    SY_ASSIGN_OR_RETURN(InferBenchResult result, RunInferBench(options_));
    SY_ASSIGN_OR_RETURN(const bool printed, EmitJson(json_, result.json.dump(2)));
    std::FILE* text = printed ? stderr : stdout;
    std::fputs(result.table.c_str(), text);
    std::fflush(text);
    if (!plot_.empty()) {
      SY_ASSIGN_OR_RETURN(std::vector<std::string> written,
                          WriteInferBenchCharts(result.json, plot_));
      for (const std::string& path : written) std::fprintf(text, "wrote %s\n", path.c_str());
    }
    return result.verdict;
  }

  InferBenchOptions options_;
  std::string dtype_ = "auto";
  QuantizeFlags quantize_;
  JsonOutput json_;
  std::string plot_;
};

}  // namespace

SY_REGISTER_COMMAND("bench infer",
                    "Expert policies side by side: prefill/decode tokens/s, TTFT, transfer stall, "
                    "bytes moved, cache hit rates, peak device memory; tokens checked against "
                    "resident",
                    BenchInferCommand);

}  // namespace sy::launcher
