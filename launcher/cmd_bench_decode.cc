// `switchyard bench decode`: CPU decode tokens/s at batch 1, as achieved memory bandwidth next to
// the machine's bandwidth measured in the same run.
//
//   switchyard bench decode --model DIR [--prompt-len P --gen-len G --warmup W --threads T
//                           --dtype bf16 --stream-mib M --json FILE]
//
// Loads a Hugging Face MoE model directory (inference/model_loader.h) on the cpu backend with
// --threads threads, prefills P tokens, runs W untimed greedy decode steps, then times G greedy
// decode steps over the KV cache (inference/kv_cache_decoder.h). A STREAM-like read and copy
// over arrays of M MiB (runtime/cpu/memory_bandwidth.h) runs on the backend's own thread pool,
// once before and once after the decode; the fastest pass is the machine's figure (STREAM's
// rule). The medians of the stream passes and of the decode steps are reported too: on a shared
// machine they are the steadier pair.
//
// Weight bytes read per decode step are counted exactly from the loaded parameters, in their
// loaded dtype:
//   - every non-expert parameter (attention, norms, routers, shared experts, dense FFNs, lm_head),
//     except the embedding table, of which one row is read (all of it when the LM head is tied
//     to it);
//   - the weights of each expert the step activated: after each step, MoeLayer::plan() of every
//     MoE layer says which experts received rows (distinct experts, so an expert chosen twice is
//     read once).
// Achieved bandwidth = weight bytes of the timed steps / their time. The KV cache bytes the
// attention reads (f32 keys and values up to the step's position) are reported beside it but not
// counted as weight bytes.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "inference/kv_cache_decoder.h"
#include "inference/model_loader.h"
#include "launcher/command.h"
#include "runtime/backend/backend.h"
#include "runtime/core/check.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/memory_bandwidth.h"

namespace sy::launcher {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Bytes of the weights a decode step reads, by what they belong to.
struct WeightBytes {
  int64_t total = 0;                         // every parameter of the model
  int64_t non_expert = 0;                    // read by every step (the embedding: one row)
  std::vector<std::vector<int64_t>> expert;  // [layer][expert]; empty for a dense layer
  int64_t expert_total = 0;
  int64_t num_experts = 0;  // (layer, expert) pairs
};

WeightBytes CountWeightBytes(const MoeModel& model) {
  const ModelConfig& c = model.config();
  WeightBytes w;
  w.expert.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.MoeIndex(l) >= 0) w.expert[static_cast<size_t>(l)].assign(c.num_experts, 0);
  }
  for (const Parameter& p : model.parameters()) {
    const auto bytes = static_cast<int64_t>(p.value.nbytes());
    w.total += bytes;
    if (p.is_expert) {
      w.expert.at(static_cast<size_t>(p.layer)).at(static_cast<size_t>(p.expert)) += bytes;
      w.expert_total += bytes;
    } else if (p.name == "embed_tokens" && !c.tie_word_embeddings) {
      w.non_expert += bytes / p.value.dim(0);  // the one row a batch-1 step gathers
    } else {
      w.non_expert += bytes;
    }
  }
  for (const auto& layer : w.expert) w.num_experts += static_cast<int64_t>(layer.size());
  return w;
}

// Time the hypervisor ran other guests on this VM's CPUs ("steal", the 8th field of the cpu line
// of /proc/stat), summed over CPUs, in seconds; -1 where it cannot be read. Counted in clock ticks
// (usually 10 ms), so a step that straddles a tick boundary may show one tick it did not suffer.
double StealSeconds() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu") {
    return -1.0;
  }
  const long ticks = sysconf(_SC_CLK_TCK);
  return ticks > 0 ? static_cast<double>(steal) / static_cast<double>(ticks) : -1.0;
}

// One timed decode step.
struct StepStats {
  double seconds = 0.0;
  double steal_seconds = 0.0;  // hypervisor steal seen during the step (StealSeconds)
  int64_t weight_bytes = 0;
  int64_t experts = 0;  // distinct (layer, expert) pairs activated
  int64_t kv_bytes = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

class BenchDecodeCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", model_dir_,
                   "Hugging Face model directory (config.json + safetensors)")
        ->required();
    app.add_option("--prompt-len", prompt_len_, "Prompt tokens prefilled first (default 16)")
        ->check(CLI::PositiveNumber);
    app.add_option("--gen-len", gen_len_, "Timed greedy decode steps (default 32)")
        ->check(CLI::PositiveNumber);
    app.add_option("--warmup", warmup_, "Untimed decode steps before them (default 2)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--threads", threads_,
                   "Threads of the cpu backend and of the bandwidth probe (default 0: "
                   "SY_NUM_THREADS, else every core)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--dtype", dtype_, "Weight dtype: f32, bf16, f16 (default bf16)");
    app.add_option("--stream-mib", stream_mib_,
                   "Read array of the bandwidth probe in MiB; the copy uses two of half that. "
                   "Make it several times the last-level cache (default 1024)")
        ->check(CLI::PositiveNumber);
    app.add_option("--stream-repeats", stream_repeats_, "Timed passes per probe (default 5)")
        ->check(CLI::PositiveNumber);
    app.add_option("--seed", seed_, "Seed of the random prompt ids (default 0)");
    app.add_option("--json", json_, "Also write the results to this JSON file");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_ASSIGN_OR_RETURN(DType dtype, ParseDType(dtype_));
    BackendOptions backend_options;
    backend_options.num_threads = threads_;
    SY_ASSIGN_OR_RETURN(auto backend, CreateBackend(Device::Cpu(), backend_options));
    auto* cpu = dynamic_cast<CpuBackend*>(backend.get());
    SY_CHECK(cpu != nullptr) << "the cpu device is not a CpuBackend";
    LoadOptions load;
    load.weight_dtype = dtype;
    SY_ASSIGN_OR_RETURN(LoadedModel loaded, LoadHfModel(*backend, model_dir_, load));
    MoeModel& model = *loaded.model;
    const ModelConfig& c = model.config();
    const WeightBytes weights = CountWeightBytes(model);
    std::fprintf(stderr, "loaded %s: %s\n",
                 std::string(HfFamilyModelType(loaded.hf.family)).c_str(), c.ToString().c_str());
    std::fprintf(stderr,
                 "weights %s: %.1f MiB, of which experts %.1f MiB (%lld experts of %.2f MiB on "
                 "average); %d threads\n",
                 std::string(DTypeName(dtype)).c_str(), weights.total / kMiB,
                 weights.expert_total / kMiB, static_cast<long long>(weights.num_experts),
                 weights.num_experts > 0 ? weights.expert_total / kMiB / weights.num_experts : 0.0,
                 cpu->pool().num_threads());

    const int64_t stream_bytes = stream_mib_ * (int64_t{1} << 20);
    const cpu::MemoryBandwidth before =
        cpu::MeasureMemoryBandwidth(cpu->pool(), stream_bytes, stream_repeats_);

    std::mt19937 rng(seed_);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size - 1));
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len_));
    for (int32_t& t : prompt) t = id(rng);
    SY_ASSIGN_OR_RETURN(auto decoder,
                        KvCacheDecoder::Create(model, prompt_len_ + warmup_ + gen_len_ + 1));
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    SY_ASSIGN_OR_RETURN(std::vector<float> logits, decoder->Append(prompt));
    const double prefill_s = std::chrono::duration<double>(Clock::now() - start).count();
    const auto vocab = static_cast<size_t>(c.vocab_size);
    int32_t token =
        Argmax(std::vector<float>(logits.end() - static_cast<ptrdiff_t>(vocab), logits.end()));
    std::vector<int32_t> generated = {token};
    std::vector<StepStats> steps;
    const int64_t kv_row_bytes =
        2 * c.kv_heads() * c.dim_per_head() * static_cast<int64_t>(sizeof(float)) * c.num_layers;
    for (int i = 0; i < warmup_ + gen_len_; ++i) {
      StepStats s;
      s.kv_bytes = (decoder->length() + 1) * kv_row_bytes;
      const double steal_before = StealSeconds();
      start = Clock::now();
      SY_ASSIGN_OR_RETURN(logits, decoder->Decode(std::span<const int32_t>(&token, 1)));
      s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      s.steal_seconds = steal_before >= 0 ? StealSeconds() - steal_before : 0.0;
      token = Argmax(logits);
      generated.push_back(token);
      s.weight_bytes = weights.non_expert;
      for (int l = 0; l < c.num_layers; ++l) {
        const int m = c.MoeIndex(l);
        if (m < 0) continue;
        const DispatchPlan& plan = model.moe_layer(m).plan();
        for (int e = 0; e < c.num_experts; ++e) {
          if (plan.group_rows[static_cast<size_t>(e)] == 0) continue;
          s.weight_bytes += weights.expert[static_cast<size_t>(l)][static_cast<size_t>(e)];
          ++s.experts;
        }
      }
      if (i >= warmup_) steps.push_back(s);
    }

    const cpu::MemoryBandwidth after =
        cpu::MeasureMemoryBandwidth(cpu->pool(), stream_bytes, stream_repeats_);
    double seconds = 0.0;
    int64_t bytes = 0, experts = 0, kv_bytes = 0;
    std::vector<double> step_seconds;
    for (const StepStats& s : steps) {
      seconds += s.seconds;
      bytes += s.weight_bytes;
      experts += s.experts;
      kv_bytes += s.kv_bytes;
      step_seconds.push_back(s.seconds);
    }
    const double n = static_cast<double>(steps.size());
    const double tokens_per_s = n / seconds;
    const double achieved = static_cast<double>(bytes) / seconds * 1e-9;
    const double read = std::max(before.read_gb_per_s, after.read_gb_per_s);
    const double copy = std::max(before.copy_gb_per_s, after.copy_gb_per_s);
    const int moe_layers = c.NumMoeLayers();
    std::printf("prefill: %d tokens in %.3f s (%.1f tokens/s)\n", prompt_len_, prefill_s,
                prompt_len_ / prefill_s);
    std::printf("decode: %d steps in %.3f s: %.2f tokens/s (median step %.2f ms)\n", gen_len_,
                seconds, tokens_per_s, Median(step_seconds) * 1e3);
    std::printf(
        "weight bytes per token: %.2f MiB (non-expert %.2f MiB + %.2f experts per MoE layer); KV "
        "cache read %.2f MiB\n",
        static_cast<double>(bytes) / n / kMiB, weights.non_expert / kMiB,
        moe_layers > 0 ? static_cast<double>(experts) / n / moe_layers : 0.0,
        static_cast<double>(kv_bytes) / n / kMiB);
    std::printf("achieved: %.2f GB/s of weights\n", achieved);
    std::printf(
        "stream (%d threads, %lld MiB read, 2 x %lld MiB copy): read %.2f GB/s, copy %.2f GB/s "
        "(before %.2f / %.2f, after %.2f / %.2f)\n",
        before.threads, static_cast<long long>(before.read_bytes >> 20),
        static_cast<long long>(before.copy_bytes >> 20), read, copy, before.read_gb_per_s,
        before.copy_gb_per_s, after.read_gb_per_s, after.copy_gb_per_s);
    std::printf("ratio: %.3f of stream copy, %.3f of stream read\n", achieved / copy,
                achieved / read);
    // On a shared machine the best stream pass and the mean decode step see different luck; the
    // medians of both are the steadier comparison.
    std::vector<double> read_passes = before.read_passes, copy_passes = before.copy_passes;
    read_passes.insert(read_passes.end(), after.read_passes.begin(), after.read_passes.end());
    copy_passes.insert(copy_passes.end(), after.copy_passes.begin(), after.copy_passes.end());
    const double median_step_achieved =
        static_cast<double>(bytes) / n / Median(step_seconds) * 1e-9;
    const double median_read = Median(read_passes), median_copy = Median(copy_passes);
    std::printf(
        "medians: step %.2f GB/s, stream pass read %.2f / copy %.2f GB/s: %.3f of copy, %.3f of "
        "read\n",
        median_step_achieved, median_read, median_copy, median_step_achieved / median_copy,
        median_step_achieved / median_read);
    // Steps the hypervisor did not interrupt against the best stream pass, which (best of ten)
    // is itself an uninterrupted one: like against like on a VM whose neighbours steal time.
    double clean_seconds = 0.0, steal_seconds = 0.0;
    int64_t clean_bytes = 0, clean_steps = 0;
    for (const StepStats& s : steps) {
      steal_seconds += s.steal_seconds;
      if (s.steal_seconds > 0) continue;
      clean_seconds += s.seconds;
      clean_bytes += s.weight_bytes;
      ++clean_steps;
    }
    const double clean_achieved =
        clean_seconds > 0 ? static_cast<double>(clean_bytes) / clean_seconds * 1e-9 : 0.0;
    std::printf(
        "hypervisor steal: %.0f ms during %lld of %lld steps; the other %lld steps: %.2f GB/s, "
        "%.3f of stream copy, %.3f of stream read\n",
        steal_seconds * 1e3, static_cast<long long>(steps.size() - clean_steps),
        static_cast<long long>(steps.size()), static_cast<long long>(clean_steps), clean_achieved,
        clean_achieved / copy, clean_achieved / read);
    if (json_.empty()) return Status::Ok();

    nlohmann::json out;
    out["model"] = model_dir_;
    out["model_type"] = std::string(HfFamilyModelType(loaded.hf.family));
    out["config"] = c.ToString();
    out["dtype"] = std::string(DTypeName(dtype));
    out["threads"] = cpu->pool().num_threads();
    out["prompt_len"] = prompt_len_;
    out["gen_len"] = gen_len_;
    out["warmup"] = warmup_;
    out["prompt"] = prompt;
    out["generated"] = generated;
    out["weight_bytes_total"] = weights.total;
    out["expert_bytes_total"] = weights.expert_total;
    out["non_expert_bytes_per_token"] = weights.non_expert;
    out["prefill_seconds"] = prefill_s;
    out["decode_seconds"] = seconds;
    out["tokens_per_s"] = tokens_per_s;
    out["median_step_ms"] = Median(step_seconds) * 1e3;
    out["weight_bytes_per_token"] = static_cast<double>(bytes) / n;
    out["kv_bytes_per_token"] = static_cast<double>(kv_bytes) / n;
    nlohmann::json per_step = nlohmann::json::array();
    for (const StepStats& s : steps) {
      per_step.push_back({{"seconds", s.seconds},
                          {"steal_seconds", s.steal_seconds},
                          {"weight_bytes", s.weight_bytes},
                          {"experts", s.experts},
                          {"kv_bytes", s.kv_bytes}});
    }
    out["steps"] = per_step;
    out["achieved_gb_per_s"] = achieved;
    out["stream_read_gb_per_s"] = read;
    out["stream_copy_gb_per_s"] = copy;
    out["stream_before"] = {{"read_gb_per_s", before.read_gb_per_s},
                            {"copy_gb_per_s", before.copy_gb_per_s}};
    out["stream_after"] = {{"read_gb_per_s", after.read_gb_per_s},
                           {"copy_gb_per_s", after.copy_gb_per_s}};
    out["stream_read_bytes"] = before.read_bytes;
    out["stream_copy_bytes"] = before.copy_bytes;
    out["ratio_to_stream_copy"] = achieved / copy;
    out["ratio_to_stream_read"] = achieved / read;
    out["median_step_gb_per_s"] = median_step_achieved;
    out["stream_read_median_gb_per_s"] = median_read;
    out["stream_copy_median_gb_per_s"] = median_copy;
    out["median_ratio_to_stream_copy"] = median_step_achieved / median_copy;
    out["median_ratio_to_stream_read"] = median_step_achieved / median_read;
    out["steal_seconds"] = steal_seconds;
    out["steal_free_steps"] = clean_steps;
    out["steal_free_gb_per_s"] = clean_achieved;
    out["steal_free_ratio_to_stream_copy"] = clean_achieved / copy;
    out["steal_free_ratio_to_stream_read"] = clean_achieved / read;
    std::ofstream file(json_, std::ios::trunc);
    file << out.dump(2) << "\n";
    file.close();
    if (!file) return IOError("cannot write " + json_);
    return Status::Ok();
  }

  std::string model_dir_;
  int prompt_len_ = 16;
  int gen_len_ = 32;
  int warmup_ = 2;
  int threads_ = 0;
  std::string dtype_ = "bf16";
  int64_t stream_mib_ = 1024;
  int stream_repeats_ = 5;
  unsigned seed_ = 0;
  std::string json_;
};

}  // namespace

SY_REGISTER_COMMAND("bench decode",
                    "CPU decode tokens/s at batch 1 as weight bandwidth, beside a STREAM-like "
                    "read and copy",
                    BenchDecodeCommand);

}  // namespace sy::launcher
