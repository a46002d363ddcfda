#include "inference/tools/infer_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "inference/expert_policy.h"
#include "inference/generate_engine.h"
#include "inference/model_loader.h"
#include "inference/offload/store_host_experts.h"
#include "runtime/backend/backend.h"
#include "runtime/core/statistics.h"

namespace sy {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string Format(const char* format, auto... args) {
  char text[1024];
  std::snprintf(text, sizeof(text), format, args...);
  return text;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// One policy's run.
struct PolicyResult {
  std::string policy;
  std::string error;  // empty: ran
  bool did_not_fit = false;
  std::vector<std::vector<int32_t>> tokens;  // [batch][gen_len]
  double prefill_s = 0, decode_s = 0, ttft_s = 0;
  double prefill_stall_s = 0, decode_stall_s = 0;
  double prefill_bytes = 0, decode_bytes = 0;  // host -> device, per repeat
  double experts_run = 0, rows = 0;            // per repeat
  std::optional<double> device_hit_rate, host_hit_rate, predictor_accuracy;
  std::string device_hit_rate_source;
  double host_store_bytes_read = 0;  // per repeat
  std::map<std::string, double> extra;
  size_t device_bytes_after_load = 0, peak_device_bytes = 0;
  size_t host_expert_bytes = 0;  // host tier the policy read from (0 for resident)
  std::string store_note;
};

class InferBench {
 public:
  explicit InferBench(const InferBenchOptions& options) : options_(options) {}

  Result<InferBenchResult> Run() {
    SY_ASSIGN_OR_RETURN(dtype_value_, ParseDType(options_.dtype));
    expert_dtype_value_ = dtype_value_;
    if (!options_.expert_dtype.empty()) {
      SY_ASSIGN_OR_RETURN(expert_dtype_value_, ParseDType(options_.expert_dtype));
    }
    SY_ASSIGN_OR_RETURN(device_value_, ParseDevice(options_.device));
    std::vector<std::string> policies = SplitList(options_.policies);
    for (const std::string& p : policies) {
      bool known = false;
      for (const std::string_view name : ExpertPolicyNames()) known = known || name == p;
      for (const std::string& spec : ExpertPolicyVariants()) known = known || spec == p;
      if (!known) {
        std::string variants;
        for (const std::string& spec : ExpertPolicyVariants()) {
          variants += (variants.empty() ? "" : ", ") + spec;
        }
        return InvalidArgumentError("--policies: unknown policy '" + p + "'; valid policies: " +
                                    ExpertPolicyList() + "; variants: " + variants);
      }
    }
    if (std::find(policies.begin(), policies.end(), "resident") == policies.end()) {
      policies.insert(policies.begin(), "resident");
    } else {
      std::stable_partition(policies.begin(), policies.end(),
                            [](const std::string& p) { return p == "resident"; });
    }
    if (!options_.store.empty()) {
      SY_ASSIGN_OR_RETURN(offload::ExpertStoreSpec spec,
                          offload::ParseExpertStoreSpec(options_.store));
      store_spec_ = spec;
    }

    SY_ASSIGN_OR_RETURN(HfModelConfig hf, LoadHfConfig(options_.model_dir));
    config_ = hf.config;
    std::mt19937 rng(options_.seed);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config_.vocab_size - 1));
    prompts_.assign(static_cast<size_t>(options_.batch), std::vector<int32_t>(options_.prompt_len));
    for (auto& prompt : prompts_) {
      for (int32_t& t : prompt) t = id(rng);
    }
    if (config_.NumMoeLayers() > 0) {
      expert_bytes_ =
          3 * static_cast<int64_t>(DTypeBytes(expert_dtype_value_,
                                              config_.hidden_size * config_.moe_intermediate_size));
    }
    std::fprintf(stderr,
                 "bench infer: %s (%s), %s weights, experts %s, batch %d, prompt %d, gen %d, %d "
                 "repeat(s), device %s%s\n",
                 options_.model_dir.c_str(), config_.ToString().c_str(),
                 std::string(DTypeName(dtype_value_)).c_str(),
                 std::string(DTypeName(expert_dtype_value_)).c_str(), options_.batch,
                 options_.prompt_len, options_.gen_len, options_.repeats, options_.device.c_str(),
                 device_value_.type == DeviceType::kSim
                     ? (" (link " + Fixed(options_.sim.link_gbps, 1) + " GB/s, " +
                        Fixed(options_.sim.link_latency_us, 0) + " us; memory " +
                        Fixed(static_cast<double>(options_.sim.memory_bytes) / kMiB, 0) + " MiB)")
                           .c_str()
                     : "");

    std::vector<PolicyResult> results;
    std::vector<std::vector<int32_t>> reference;
    for (size_t i = 0; i < policies.size(); ++i) {
      const std::string& policy = policies[i];
      std::fprintf(stderr, "-- policy %zu/%zu: %s\n", i + 1, policies.size(), policy.c_str());
      PolicyResult r = RunPolicy(policy, options_.sim);
      if (!r.error.empty()) std::fprintf(stderr, "%s: %s\n", policy.c_str(), r.error.c_str());
      if (policy == "resident") {
        if (r.error.empty()) {
          reference = r.tokens;
        } else {
          // Resident did not fit (or failed) under the budget: the reference tokens come from an
          // unbounded device.
          SimOptions unbounded = options_.sim;
          unbounded.memory_bytes = std::numeric_limits<size_t>::max() / 4;
          const PolicyResult ref = RunPolicy(policy, unbounded);
          if (!ref.error.empty()) {
            return InternalError("resident, the reference, failed: " + ref.error);
          }
          reference = ref.tokens;
        }
      }
      results.push_back(std::move(r));
    }

    std::vector<std::string> mismatches, failures;
    for (const PolicyResult& r : results) {
      if (!r.error.empty()) {
        if (!(r.policy == "resident" && r.did_not_fit)) failures.push_back(r.policy);
        continue;
      }
      if (r.tokens != reference) mismatches.push_back(r.policy);
    }
    InferBenchResult result;
    result.table = Table(results, mismatches);
    for (const std::string& p : mismatches) {
      result.table += "MISMATCH: policy " + p +
                      " generated different tokens from resident; greedy decoding through every "
                      "policy must give resident's tokens\n";
    }
    result.json = Json(results, reference, mismatches, failures);
    if (!mismatches.empty()) {
      result.verdict = InternalError(std::to_string(mismatches.size()) +
                                     " policy(ies) generated tokens different from resident's");
    } else if (!failures.empty()) {
      result.verdict =
          InternalError(std::to_string(failures.size()) + " policy(ies) failed to run");
    }
    return result;
  }

 private:
  PolicyResult RunPolicy(const std::string& policy, const SimOptions& sim) {
    PolicyResult r;
    r.policy = policy;
    const Status status = RunPolicyStatus(policy, sim, r);
    if (!status.ok()) {
      r.error = status.ToString();
      // Resident's weights past the device budget. Any other policy's ResourceExhausted (its
      // slots, pins) is a failure.
      r.did_not_fit = policy == "resident" && status.code() == StatusCode::kResourceExhausted;
    }
    return r;
  }

  Status RunPolicyStatus(const std::string& policy, const SimOptions& sim, PolicyResult& r) {
    BackendOptions backend_options;
    backend_options.num_threads = options_.threads;
    backend_options.sim = sim;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                        CreateBackend(device_value_, backend_options));
    // Declared after the backend and before the model: destroyed after the model, which points
    // at it, and before the backend.
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertProvider> provider,
                        MakeExpertProvider(policy, options_.policy_options));
    const bool on_host = policy != "resident";
    LoadOptions load;
    load.weight_dtype = dtype_value_;
    load.expert_dtype = expert_dtype_value_;
    load.experts_on_host = on_host;
    load.pregate = options_.pregate;
    SY_ASSIGN_OR_RETURN(LoadedModel loaded, LoadHfModel(*backend, options_.model_dir, load));
    r.device_bytes_after_load = backend->memory_stats().bytes_in_use;
    offload::StoreHostExperts* store = nullptr;
    if (loaded.host_experts != nullptr) {
      const offload::ExpertLayout& layout = loaded.host_experts->layout();
      if (store_spec_.has_value()) {
        offload::StoreHostExpertsOptions options;
        options.host_cache_experts = options_.host_cache_experts > 0
                                         ? static_cast<size_t>(options_.host_cache_experts)
                                         : static_cast<size_t>(2 * layout.num_experts);
        SY_ASSIGN_OR_RETURN(
            std::unique_ptr<offload::StoreHostExperts> tier,
            offload::StoreHostExperts::Open(*store_spec_, *loaded.host_experts, options));
        store = tier.get();
        r.store_note = std::string(tier->created() ? "written to " : "reused ") +
                       store_spec_->path + " (" + tier->file_system_name() + "), " +
                       std::to_string(options.host_cache_experts) + " host slots";
        std::fprintf(stderr, "store: %s\n", r.store_note.c_str());
        r.host_expert_bytes = options.host_cache_experts * layout.expert_bytes();
        loaded.host_experts.reset();  // the store holds them now
        provider->set_host_experts(std::move(tier));
      } else {
        r.host_expert_bytes = static_cast<size_t>(layout.num_layers) *
                              static_cast<size_t>(layout.num_experts) * layout.expert_bytes();
        provider->set_host_experts(loaded.host_experts);
      }
    }
    MoeModel& model = *loaded.model;
    SY_RETURN_IF_ERROR(provider->Install(model));
    const storage::CacheStats host_before = store ? store->cache_stats() : storage::CacheStats{};

    SY_ASSIGN_OR_RETURN(auto engine, GenerateEngine::Create(
                                         model, &*provider,
                                         {.max_batch = options_.batch,
                                          .max_context = options_.prompt_len + options_.gen_len}));
    std::vector<double> prefill_times, decode_times;
    for (int rep = 0; rep < options_.repeats; ++rep) {
      std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(options_.batch));
      for (int b = 0; b < options_.batch; ++b) {
        GenerateRequest request;
        request.prompt = prompts_[static_cast<size_t>(b)];
        request.sampling.temperature = 0.0f;
        request.sampling.max_new_tokens = options_.gen_len;
        std::vector<int32_t>* out = &tokens[static_cast<size_t>(b)];
        SY_RETURN_IF_ERROR(engine
                               ->Submit(std::move(request),
                                        [out](const TokenEvent& e) {
                                          out->push_back(e.token);
                                          return true;
                                        })
                               .status());
      }
      const ExpertProviderStats at_start = provider->stats();
      const GenerateStats engine_start = engine->stats();
      // Every sequence's prompt, one after another, each with its first token.
      SY_RETURN_IF_ERROR(engine->Prefill());
      const double prefill_s = engine->stats().prefill_seconds - engine_start.prefill_seconds;
      const ExpertProviderStats after_prefill = provider->stats();
      while (!engine->idle()) SY_RETURN_IF_ERROR(engine->Decode());
      const double decode_s = engine->stats().decode_seconds - engine_start.decode_seconds;
      const ExpertProviderStats at_end = provider->stats();
      prefill_times.push_back(prefill_s);
      decode_times.push_back(decode_s);
      r.prefill_stall_s += after_prefill.stall_seconds - at_start.stall_seconds;
      r.decode_stall_s += at_end.stall_seconds - after_prefill.stall_seconds;
      r.prefill_bytes +=
          static_cast<double>(after_prefill.bytes_host_to_device - at_start.bytes_host_to_device);
      r.decode_bytes +=
          static_cast<double>(at_end.bytes_host_to_device - after_prefill.bytes_host_to_device);
      if (rep == 0) {
        r.tokens = tokens;
      } else if (tokens != r.tokens) {
        return InternalError("policy " + policy + " generated different tokens in repeat " +
                             std::to_string(rep + 1) + " than in the first");
      }
    }
    const double n = options_.repeats;
    r.prefill_stall_s /= n;
    r.decode_stall_s /= n;
    r.prefill_bytes /= n;
    r.decode_bytes /= n;
    r.prefill_s = Median(prefill_times);
    r.decode_s = Median(decode_times);
    r.ttft_s = r.prefill_s;  // every sequence has its first token once the batch is prefilled
    const ExpertProviderStats& stats = provider->stats();
    r.experts_run = static_cast<double>(stats.experts_run) / n;
    r.rows = static_cast<double>(stats.rows) / n;
    r.extra = provider->extra_metrics();
    if (auto it = r.extra.find("device_cache_hit_rate"); it != r.extra.end()) {
      r.device_hit_rate = it->second;
      r.device_hit_rate_source = "provider";
    } else if (policy == "resident") {
      r.device_hit_rate = 1.0;
      r.device_hit_rate_source = "resident";
    } else if (stats.experts_run > 0 && expert_bytes_ > 0) {
      const double fetched =
          static_cast<double>(stats.bytes_host_to_device) / static_cast<double>(expert_bytes_);
      r.device_hit_rate =
          std::clamp(1.0 - fetched / static_cast<double>(stats.experts_run), 0.0, 1.0);
      r.device_hit_rate_source = "derived";
    }
    if (auto it = r.extra.find("predictor_accuracy"); it != r.extra.end()) {
      r.predictor_accuracy = it->second;
    }
    if (store != nullptr) {
      const storage::CacheStats host = store->cache_stats();
      const double hits = static_cast<double>(host.hits - host_before.hits);
      const double misses = static_cast<double>(host.misses - host_before.misses);
      if (hits + misses > 0) r.host_hit_rate = hits / (hits + misses);
      r.host_store_bytes_read = static_cast<double>(host.bytes_read - host_before.bytes_read) / n;
    }
    backend->Synchronize();
    r.peak_device_bytes = backend->memory_stats().peak_bytes_in_use;
    return Status::Ok();
  }

  const PolicyResult* Resident(const std::vector<PolicyResult>& results) const {
    for (const PolicyResult& r : results) {
      if (r.policy == "resident" && r.error.empty()) return &r;
    }
    return nullptr;
  }

  double PrefillTps(const PolicyResult& r) const {
    return r.prefill_s > 0 ? options_.batch * static_cast<double>(options_.prompt_len) / r.prefill_s
                           : 0.0;
  }
  double DecodeTps(const PolicyResult& r) const {
    return r.decode_s > 0 ? options_.batch * static_cast<double>(options_.gen_len - 1) / r.decode_s
                          : 0.0;
  }

  std::string Table(const std::vector<PolicyResult>& results,
                    const std::vector<std::string>& mismatches) const {
    std::string table;
    const PolicyResult* res = Resident(results);
    auto opt = [](const std::optional<double>& v) { return v ? Fixed(*v, 3) : std::string("-"); };
    auto ratio = [](double a, double b) { return b > 0 ? Fixed(a / b, 3) : std::string("-"); };
    table +=
        "| policy | prefill tok/s | decode tok/s | TTFT ms | stall prefill s | stall decode s | "
        "H->D MiB | device hit | host hit | predictor acc | peak device MiB | prefill vs "
        "resident | decode vs resident | TTFT vs resident | peak vs resident | tokens |\n";
    table +=
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
        "--- | --- |\n";
    for (const PolicyResult& r : results) {
      if (!r.error.empty()) {
        table += Format("| %s | %s | | | | | | | | | | | | | | |\n", r.policy.c_str(),
                        r.did_not_fit ? "does not fit the device" : ("failed: " + r.error).c_str());
        continue;
      }
      const bool same =
          std::find(mismatches.begin(), mismatches.end(), r.policy) == mismatches.end();
      table += Format(
          "| %s | %.1f | %.2f | %.1f | %.4f | %.4f | %.1f | %s | %s | %s | %.1f | %s | %s | %s | "
          "%s | %s |\n",
          r.policy.c_str(), PrefillTps(r), DecodeTps(r), r.ttft_s * 1e3, r.prefill_stall_s,
          r.decode_stall_s, (r.prefill_bytes + r.decode_bytes) / kMiB,
          opt(r.device_hit_rate).c_str(), opt(r.host_hit_rate).c_str(),
          opt(r.predictor_accuracy).c_str(), static_cast<double>(r.peak_device_bytes) / kMiB,
          res ? ratio(PrefillTps(r), PrefillTps(*res)).c_str() : "-",
          res ? ratio(DecodeTps(r), DecodeTps(*res)).c_str() : "-",
          res ? ratio(r.ttft_s, res->ttft_s).c_str() : "-",
          res ? ratio(static_cast<double>(r.peak_device_bytes),
                      static_cast<double>(res->peak_device_bytes))
                    .c_str()
              : "-",
          same ? "= resident" : "**MISMATCH**");
    }
    return table;
  }

  nlohmann::json Json(const std::vector<PolicyResult>& results,
                      const std::vector<std::vector<int32_t>>& reference,
                      const std::vector<std::string>& mismatches,
                      const std::vector<std::string>& failures) const {
    using nlohmann::json;
    const PolicyResult* res = Resident(results);
    auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(nullptr); };
    json out;
    out["model"] = options_.model_dir;
    out["config"] = config_.ToString();
    out["setup"] = {{"device", options_.device},
                    {"dtype", std::string(DTypeName(dtype_value_))},
                    {"expert_dtype", std::string(DTypeName(expert_dtype_value_))},
                    {"prompt_len", options_.prompt_len},
                    {"gen_len", options_.gen_len},
                    {"batch", options_.batch},
                    {"repeats", options_.repeats},
                    {"seed", options_.seed},
                    {"link_gbps", options_.sim.link_gbps},
                    {"link_latency_us", options_.sim.link_latency_us},
                    {"device_mem", options_.sim.memory_bytes},
                    {"device_slots", options_.policy_options.device_slots},
                    {"device_cache", options_.policy_options.device_cache},
                    {"store", options_.store},
                    {"host_cache_experts", options_.host_cache_experts},
                    {"expert_bytes", expert_bytes_}};
    out["prompts"] = prompts_;
    out["reference_tokens"] = reference;
    json rows = json::array();
    for (const PolicyResult& r : results) {
      json row;
      row["policy"] = r.policy;
      row["ok"] = r.error.empty();
      if (!r.error.empty()) {
        row["error"] = r.error;
        row["did_not_fit"] = r.did_not_fit;
        rows.push_back(row);
        continue;
      }
      row["tokens"] = r.tokens;
      row["tokens_match_resident"] =
          std::find(mismatches.begin(), mismatches.end(), r.policy) == mismatches.end();
      row["prefill_seconds"] = r.prefill_s;
      row["decode_seconds"] = r.decode_s;
      row["prefill_tokens_per_s"] = PrefillTps(r);
      row["decode_tokens_per_s"] = DecodeTps(r);
      row["ttft_ms"] = r.ttft_s * 1e3;
      row["stall_seconds"] = r.prefill_stall_s + r.decode_stall_s;
      row["prefill_stall_seconds"] = r.prefill_stall_s;
      row["decode_stall_seconds"] = r.decode_stall_s;
      row["bytes_host_to_device"] = r.prefill_bytes + r.decode_bytes;
      row["prefill_bytes_host_to_device"] = r.prefill_bytes;
      row["decode_bytes_host_to_device"] = r.decode_bytes;
      row["experts_run"] = r.experts_run;
      row["rows"] = r.rows;
      row["device_cache_hit_rate"] = opt(r.device_hit_rate);
      row["device_cache_hit_rate_source"] = r.device_hit_rate_source;
      row["host_cache_hit_rate"] = opt(r.host_hit_rate);
      row["host_store_bytes_read"] = r.host_store_bytes_read;
      row["predictor_accuracy"] = opt(r.predictor_accuracy);
      row["device_bytes_after_load"] = r.device_bytes_after_load;
      row["peak_device_bytes"] = r.peak_device_bytes;
      row["host_expert_bytes"] = r.host_expert_bytes;
      row["store"] = r.store_note;
      row["extra_metrics"] = r.extra;
      row["vs_resident"] = {
          {"prefill_tokens_per_s", res ? ratio(PrefillTps(r), PrefillTps(*res)) : json(nullptr)},
          {"decode_tokens_per_s", res ? ratio(DecodeTps(r), DecodeTps(*res)) : json(nullptr)},
          {"ttft", res ? ratio(r.ttft_s, res->ttft_s) : json(nullptr)},
          {"peak_device_bytes", res ? ratio(static_cast<double>(r.peak_device_bytes),
                                            static_cast<double>(res->peak_device_bytes))
                                    : json(nullptr)}};
      rows.push_back(row);
    }
    out["policies"] = rows;
    out["mismatches"] = mismatches;
    out["failures"] = failures;
    return out;
  }

  InferBenchOptions options_;
  DType dtype_value_ = DType::kBF16;
  DType expert_dtype_value_ = DType::kBF16;
  Device device_value_ = Device::Cpu();
  std::optional<offload::ExpertStoreSpec> store_spec_;
  ModelConfig config_;
  std::vector<std::vector<int32_t>> prompts_;
  int64_t expert_bytes_ = 0;
};

}  // namespace

Result<InferBenchResult> RunInferBench(const InferBenchOptions& options) {
  return InferBench(options).Run();
}

}  // namespace sy
