#include "inference/tools/decode_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>

#include "inference/generate_engine.h"
#include "inference/gguf_model.h"
#include "inference/model_loader.h"
#include "runtime/backend/backend.h"
#include "runtime/core/check.h"
#include "runtime/core/progress.h"
#include "runtime/core/statistics.h"
#include "runtime/core/thread_pool.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/memory_bandwidth.h"
#include "runtime/cpu/weight_prefetch.h"
#include "runtime/model/dense_matrices.h"

namespace sy {
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

std::string Line(const char* format, auto... args) {
  char text[512];
  std::snprintf(text, sizeof(text), format, args...);
  return std::string(text) + "\n";
}

}  // namespace

Result<DecodeBenchResult> RunDecodeBench(const DecodeBenchOptions& options) {
  if (options.prompt_len < 1 || options.gen_len < 1 || options.warmup < 0) {
    return InvalidArgumentError("bench decode: prompt_len and gen_len must be >= 1, warmup >= 0");
  }
  BackendOptions backend_options;
  backend_options.num_threads = options.threads;
  SY_ASSIGN_OR_RETURN(auto backend, CreateBackend(Device::Cpu(), backend_options));
  auto* cpu = dynamic_cast<CpuBackend*>(backend.get());
  SY_CHECK(cpu != nullptr) << "the cpu device is not a CpuBackend";
  LoadOptions load;
  load.weight_dtype = options.dtype;
  load.expert_dtype = options.expert_dtype;
  load.keep_quantized_matrices = options.keep_quantized_matrices;
  ProgressLine loading(stderr, "loading " + options.model_dir);
  load.progress = [&loading](int64_t done, int64_t total) { loading.Update(done, total); };
  Result<LoadedModel> opened = IsGgufPath(options.model_dir)
                                   ? LoadGgufModel(*backend, options.model_dir, load)
                                   : LoadHfModel(*backend, options.model_dir, load);
  loading.Finish();
  SY_ASSIGN_OR_RETURN(LoadedModel loaded, std::move(opened));
  MoeModel& model = *loaded.model;
  const ModelConfig& c = model.config();
  const WeightBytes weights = CountWeightBytes(model);
  const std::string expert_dtype = DescribeExpertDTypes(model);
  std::fprintf(stderr, "loaded %s: %s-style, %s, %s, experts %s%s\n", options.model_dir.c_str(),
               std::string(HfFamilyDisplayName(loaded.hf.family)).c_str(), c.Summary().c_str(),
               std::string(DTypeName(options.dtype)).c_str(), expert_dtype.c_str(),
               DescribeMatrixDTypes(model.options().matrix_dtypes).c_str());
  std::fprintf(stderr,
               "weights %s: %.1f MiB, of which experts %.1f MiB (%lld experts of %.2f MiB on "
               "average); %d threads; weights prefetched with %s\n",
               std::string(DTypeName(options.dtype)).c_str(), weights.total / kMiB,
               weights.expert_total / kMiB, static_cast<long long>(weights.num_experts),
               weights.num_experts > 0 ? weights.expert_total / kMiB / weights.num_experts : 0.0,
               cpu->pool().num_threads(), cpu::WeightPrefetchName(cpu::ChosenWeightPrefetch()));

  const int64_t stream_bytes = options.stream_mib * (int64_t{1} << 20);
  const cpu::MemoryBandwidth before =
      cpu::MeasureMemoryBandwidth(cpu->pool(), stream_bytes, options.stream_repeats);

  std::mt19937 rng(options.seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(c.vocab_size - 1));
  GenerateRequest request;
  request.prompt.resize(static_cast<size_t>(options.prompt_len));
  for (int32_t& t : request.prompt) t = id(rng);
  request.sampling.temperature = 0.0f;
  request.sampling.max_new_tokens = 1 + options.warmup + options.gen_len;
  const int64_t context = options.prompt_len + request.sampling.max_new_tokens;
  SY_ASSIGN_OR_RETURN(auto engine,
                      GenerateEngine::Create(model, /*provider=*/nullptr,
                                             {.max_batch = 1, .max_context = context}));
  std::vector<int32_t> generated;
  SY_RETURN_IF_ERROR(engine
                         ->Submit(request,
                                  [&generated](const TokenEvent& e) {
                                    generated.push_back(e.token);
                                    return true;
                                  })
                         .status());
  SY_RETURN_IF_ERROR(engine->Prefill());
  const double prefill_s = engine->stats().prefill_seconds;
  std::vector<DecodeStepStats> steps;
  const int64_t kv_row_bytes =
      2 * c.kv_heads() * c.dim_per_head() * static_cast<int64_t>(sizeof(float)) * c.num_layers;
  // Between steps, outside their timing (the engine's own clock).
  ProgressLine decoding(stderr, "decode steps");
  ThreadPool& pool = cpu->pool();
  ThreadPool::RegionCounts regions_before;
  for (int i = 0; i < options.warmup + options.gen_len; ++i) {
    decoding.Update(i, options.warmup + options.gen_len);
    if (i == options.warmup) {
      pool.set_count_regions(true);
      regions_before = pool.region_counts();
    }
    DecodeStepStats s;
    s.kv_bytes = (engine->decoder().length() + 1) * kv_row_bytes;
    const double steal_before = StealSeconds();
    const double seconds_before = engine->stats().decode_seconds;
    SY_RETURN_IF_ERROR(engine->Decode());
    s.seconds = engine->stats().decode_seconds - seconds_before;
    s.steal_seconds = steal_before >= 0 ? StealSeconds() - steal_before : 0.0;
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
    if (i >= options.warmup) steps.push_back(s);
  }
  decoding.Update(options.warmup + options.gen_len, options.warmup + options.gen_len);
  decoding.Finish();
  const ThreadPool::RegionCounts regions = pool.region_counts() - regions_before;
  pool.set_count_regions(false);

  const cpu::MemoryBandwidth after =
      cpu::MeasureMemoryBandwidth(cpu->pool(), stream_bytes, options.stream_repeats);
  double seconds = 0.0;
  int64_t bytes = 0, experts = 0, kv_bytes = 0;
  std::vector<double> step_seconds;
  for (const DecodeStepStats& s : steps) {
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
  // On a shared machine the best stream pass and the mean decode step see different luck; the
  // medians of both are the steadier comparison.
  std::vector<double> read_passes = before.read_passes, copy_passes = before.copy_passes;
  read_passes.insert(read_passes.end(), after.read_passes.begin(), after.read_passes.end());
  copy_passes.insert(copy_passes.end(), after.copy_passes.begin(), after.copy_passes.end());
  const double median_step_achieved = static_cast<double>(bytes) / n / Median(step_seconds) * 1e-9;
  const double median_read = Median(read_passes), median_copy = Median(copy_passes);
  // Steps the hypervisor did not interrupt against the best stream pass, which (best of ten) is
  // itself an uninterrupted one.
  double clean_seconds = 0.0, steal_seconds = 0.0;
  int64_t clean_bytes = 0, clean_steps = 0;
  for (const DecodeStepStats& s : steps) {
    steal_seconds += s.steal_seconds;
    if (s.steal_seconds > 0) continue;
    clean_seconds += s.seconds;
    clean_bytes += s.weight_bytes;
    ++clean_steps;
  }
  const double clean_achieved =
      clean_seconds > 0 ? static_cast<double>(clean_bytes) / clean_seconds * 1e-9 : 0.0;

  DecodeBenchResult result;
  std::string& r = result.report;
  r += Line("prefill: %d tokens in %.3f s (%.1f tokens/s)", options.prompt_len, prefill_s,
            options.prompt_len / prefill_s);
  r += Line("decode: %d steps in %.3f s: %.2f tokens/s (median step %.2f ms)", options.gen_len,
            seconds, tokens_per_s, Median(step_seconds) * 1e3);
  r += Line(
      "weight bytes per token: %.2f MiB (non-expert %.2f MiB + %.2f experts per MoE layer); KV "
      "cache read %.2f MiB",
      static_cast<double>(bytes) / n / kMiB, weights.non_expert / kMiB,
      moe_layers > 0 ? static_cast<double>(experts) / n / moe_layers : 0.0,
      static_cast<double>(kv_bytes) / n / kMiB);
  r += Line("achieved: %.2f GB/s of weights", achieved);
  r += Line(
      "stream (%d threads, %lld MiB read, 2 x %lld MiB copy): read %.2f GB/s, copy %.2f GB/s "
      "(before %.2f / %.2f, after %.2f / %.2f)",
      before.threads, static_cast<long long>(before.read_bytes >> 20),
      static_cast<long long>(before.copy_bytes >> 20), read, copy, before.read_gb_per_s,
      before.copy_gb_per_s, after.read_gb_per_s, after.copy_gb_per_s);
  r += Line("ratio: %.3f of stream copy, %.3f of stream read", achieved / copy, achieved / read);
  r += Line(
      "medians: step %.2f GB/s, stream pass read %.2f / copy %.2f GB/s: %.3f of copy, %.3f of "
      "read",
      median_step_achieved, median_read, median_copy, median_step_achieved / median_copy,
      median_step_achieved / median_read);
  r += Line(
      "hypervisor steal: %.0f ms during %lld of %lld steps; the other %lld steps: %.2f GB/s, "
      "%.3f of stream copy, %.3f of stream read",
      steal_seconds * 1e3, static_cast<long long>(steps.size() - clean_steps),
      static_cast<long long>(steps.size()), static_cast<long long>(clean_steps), clean_achieved,
      clean_achieved / copy, clean_achieved / read);

  // The pool's regions (the GEMVs and every other parallel op) against the rest of the step, which
  // the calling thread runs alone while the workers wait.
  const double region_ms = static_cast<double>(regions.region_ns) / n * 1e-6;
  const double serial_ms = seconds / n * 1e3 - region_ms;
  const int workers = pool.num_threads() - 1;
  const double worker_share =
      regions.region_ns > 0 && workers > 0
          ? static_cast<double>(regions.worker_busy_ns) / (workers * regions.region_ns)
          : 0.0;
  const double join_delay_us =
      regions.joins > 0 ? static_cast<double>(regions.join_delay_ns) / regions.joins * 1e-3 : 0.0;
  r += Line(
      "thread pool, per step: %.1f regions, %.2f ms in them and %.2f ms outside (the caller "
      "alone); workers busy %.1f%% of the regions' time, joining %.1f us after a region opens "
      "(mean)",
      static_cast<double>(regions.regions) / n, region_ms, serial_ms, 100.0 * worker_share,
      join_delay_us);

  nlohmann::json& out = result.json;
  out["model"] = options.model_dir;
  out["model_type"] = std::string(HfFamilyModelType(loaded.hf.family));
  out["config"] = c.ToString();
  out["dtype"] = std::string(DTypeName(options.dtype));
  out["expert_dtype"] = expert_dtype;
  out["threads"] = cpu->pool().num_threads();
  out["weight_prefetch"] = cpu::WeightPrefetchName(cpu::ChosenWeightPrefetch());
  out["prompt_len"] = options.prompt_len;
  out["gen_len"] = options.gen_len;
  out["warmup"] = options.warmup;
  out["prompt"] = request.prompt;
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
  for (const DecodeStepStats& s : steps) {
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
  out["pool_regions_per_step"] = static_cast<double>(regions.regions) / n;
  out["pool_region_ms_per_step"] = region_ms;
  out["pool_serial_ms_per_step"] = serial_ms;
  out["pool_worker_busy_share"] = worker_share;
  out["pool_join_delay_us"] = join_delay_us;
  out["steal_seconds"] = steal_seconds;
  out["steal_free_steps"] = clean_steps;
  out["steal_free_gb_per_s"] = clean_achieved;
  out["steal_free_ratio_to_stream_copy"] = clean_achieved / copy;
  out["steal_free_ratio_to_stream_read"] = clean_achieved / read;
  return result;
}

}  // namespace sy
