// `switchyard bench infer`: expert policies side by side on one model, one device setting and the
// same prompts (issue "Offloaded inference", "Measurement"; docs/offload.md, "bench infer").
//
//   switchyard bench infer --model DIR --policies resident,ondemand,... [--prompt-len P
//       --gen-len G --batch B --device sim --link-gbps X --link-latency-us U --device-mem BYTES
//       --device-slots N --device-cache lru --store uring:PATH --host-cache-experts N
//       --dtype bf16 --repeats R --seed S --threads T --json FILE]
//
// For each policy, in turn, on a fresh backend (so its memory peak is its own): load the model
// (resident: every weight on the device; every other policy: the routed experts straight into
// pinned host memory, LoadOptions::experts_on_host, or, with --store, into the SSD/PMem expert
// store behind a host cache of --host-cache-experts experts), install the provider, then R times:
// prefill B random prompts of P tokens (one sequence after another), and decode greedily until
// every sequence has G tokens (G - 1 batched decode steps). Times are medians over the repeats;
// counters are per repeat (totals / R).
//
//   prefill tokens/s  B * P / prefill time
//   decode tokens/s   B * (G - 1) / decode time
//   TTFT              start to the first token of every sequence (= the batch's prefill)
//   stall             time the compute stream waited for expert weights (the provider's counter:
//                     transfers on the critical path), split into prefill and decode
//   H->D bytes        expert bytes moved host -> device
//   device hit rate   the provider's "device_cache_hit_rate" when it reports one; otherwise
//                     1 - (experts fetched = H->D bytes / expert bytes) / experts run, clamped
//   host hit rate     with --store: the host cache's hits / accesses; without: every expert is in
//                     DRAM (null)
//   predictor acc.    the provider's "predictor_accuracy" (null when it has no predictor)
//   peak device mem   the backend's peak bytes in use, the load included
// Every policy's tokens must equal resident's (greedy decoding is deterministic); resident runs
// first as the reference even when not listed (on an unbounded device when it does not fit the
// budget). A mismatch or a failed policy is reported loudly and the exit status is 1.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "inference/expert_policy.h"
#include "inference/kv_cache_decoder.h"
#include "inference/model_loader.h"
#include "inference/offload/store_host_experts.h"
#include "launcher/command.h"
#include "runtime/backend/backend.h"

namespace sy::launcher {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int32_t Argmax(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
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

class BenchInferCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--model", model_dir_,
                   "Hugging Face model directory (config.json + safetensors)")
        ->required();
    app.add_option("--policies", policies_,
                   "Expert policies, comma-separated (" + ExpertPolicyList() +
                       "); resident is the reference and always runs (default resident,ondemand)");
    app.add_option("--prompt-len", prompt_len_, "Prompt tokens per sequence (default 16)")
        ->check(CLI::PositiveNumber);
    app.add_option("--gen-len", gen_len_,
                   "Tokens generated per sequence, the first from the prefill (default 16)")
        ->check(CLI::PositiveNumber);
    app.add_option("--batch", batch_, "Sequences decoded together (default 1)")
        ->check(CLI::PositiveNumber);
    app.add_option("--device", device_, "cpu, sim or cuda:N (default sim)");
    app.add_option("--link-gbps", sim_.link_gbps,
                   "sim: host <-> device link GB/s each way (default 25, PCIe 4.0 x16)")
        ->check(CLI::PositiveNumber);
    app.add_option("--link-latency-us", sim_.link_latency_us,
                   "sim: latency per copy in us (default 10)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--device-mem", sim_.memory_bytes,
                   "sim: device memory budget in bytes (default 8 GiB)")
        ->check(CLI::PositiveNumber);
    app.add_option("--device-slots", policy_options_.device_slots,
                   "Device expert slots for the policies that take them (default: each "
                   "policy's own)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--device-cache", policy_options_.device_cache,
                   "Device cache policy of the slots: none, lru, lfu, static (default: each "
                   "policy's own)");
    app.add_option("--profile", policy_options_.profile, "Expert popularity profile (JSON)");
    app.add_option("--predictor", policy_options_.predictor,
                   "predictive: predictor file from `switchyard train-predictor`");
    app.add_option("--store", store_,
                   "Serve the experts from the expert store: uring:PATH, pmem:PATH or "
                   "posix:PATH (written from the model when PATH is absent, reused otherwise)");
    app.add_option("--host-cache-experts", host_cache_experts_,
                   "With --store: host cache slots, in experts (default: two MoE layers' worth)")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--pregate", pregate_,
                 "Load the checkpoint as a pre-gated model (MoE layer m's pre-gate = layer m+1's "
                 "gate), for the pregated policy; every policy then runs that model");
    app.add_option("--dtype", dtype_, "Weight dtype: f32, bf16, f16 (default bf16)");
    app.add_option("--repeats", repeats_, "Timed runs per policy; times are medians (default 1)")
        ->check(CLI::PositiveNumber);
    app.add_option("--seed", seed_, "Seed of the random prompt ids (default 0)");
    app.add_option("--threads", threads_, "Backend threads (default 0: SY_NUM_THREADS or all)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--json", json_, "Also write the results to this JSON file");
  }

  int Run() override { return ExitCode(RunStatus()); }

 private:
  Status RunStatus() {
    SY_ASSIGN_OR_RETURN(dtype_value_, ParseDType(dtype_));
    SY_ASSIGN_OR_RETURN(device_value_, ParseDevice(device_));
    std::vector<std::string> policies = SplitList(policies_);
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
    if (!store_.empty()) {
      SY_ASSIGN_OR_RETURN(offload::ExpertStoreSpec spec, offload::ParseExpertStoreSpec(store_));
      store_spec_ = spec;
    }

    SY_ASSIGN_OR_RETURN(HfModelConfig hf, LoadHfConfig(model_dir_));
    config_ = hf.config;
    std::mt19937 rng(seed_);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config_.vocab_size - 1));
    prompts_.assign(static_cast<size_t>(batch_), std::vector<int32_t>(prompt_len_));
    for (auto& prompt : prompts_) {
      for (int32_t& t : prompt) t = id(rng);
    }
    if (config_.NumMoeLayers() > 0) {
      expert_bytes_ = 3 * config_.hidden_size * config_.moe_intermediate_size *
                      static_cast<int64_t>(DTypeSize(dtype_value_));
    }
    std::fprintf(
        stderr,
        "bench infer: %s (%s), %s weights, batch %d, prompt %d, gen %d, %d repeat(s), "
        "device %s%s\n",
        model_dir_.c_str(), config_.ToString().c_str(),
        std::string(DTypeName(dtype_value_)).c_str(), batch_, prompt_len_, gen_len_, repeats_,
        device_.c_str(),
        device_value_.type == DeviceType::kSim
            ? (" (link " + Fixed(sim_.link_gbps, 1) + " GB/s, " + Fixed(sim_.link_latency_us, 0) +
               " us; memory " + Fixed(static_cast<double>(sim_.memory_bytes) / kMiB, 0) + " MiB)")
                  .c_str()
            : "");

    std::vector<PolicyResult> results;
    std::vector<std::vector<int32_t>> reference;
    for (const std::string& policy : policies) {
      std::fprintf(stderr, "-- %s\n", policy.c_str());
      PolicyResult r = RunPolicy(policy, sim_);
      if (!r.error.empty()) std::fprintf(stderr, "%s: %s\n", policy.c_str(), r.error.c_str());
      if (policy == "resident") {
        if (r.error.empty()) {
          reference = r.tokens;
        } else {
          // Resident did not fit (or failed) under the budget: the reference tokens come from an
          // unbounded device.
          SimOptions unbounded = sim_;
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
    PrintTable(results, mismatches);
    for (const std::string& p : mismatches) {
      std::fprintf(stderr,
                   "MISMATCH: policy %s generated different tokens from resident; greedy "
                   "decoding through every policy must give resident's tokens\n",
                   p.c_str());
    }
    if (!json_.empty()) SY_RETURN_IF_ERROR(WriteJson(results, reference, mismatches, failures));
    if (!mismatches.empty()) {
      return InternalError(std::to_string(mismatches.size()) +
                           " policy(ies) generated tokens different from resident's");
    }
    if (!failures.empty()) {
      return InternalError(std::to_string(failures.size()) + " policy(ies) failed to run");
    }
    return Status::Ok();
  }

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
    backend_options.num_threads = threads_;
    backend_options.sim = sim;
    SY_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                        CreateBackend(device_value_, backend_options));
    // Declared after the backend and before the model: destroyed after the model, which points
    // at it, and before the backend.
    SY_ASSIGN_OR_RETURN(std::unique_ptr<ExpertProvider> provider,
                        MakeExpertProvider(policy, policy_options_));
    const bool on_host = policy != "resident";
    LoadOptions load;
    load.weight_dtype = dtype_value_;
    load.experts_on_host = on_host;
    load.pregate = pregate_;
    SY_ASSIGN_OR_RETURN(LoadedModel loaded, LoadHfModel(*backend, model_dir_, load));
    r.device_bytes_after_load = backend->memory_stats().bytes_in_use;
    offload::StoreHostExperts* store = nullptr;
    if (loaded.host_experts != nullptr) {
      const offload::ExpertLayout& layout = loaded.host_experts->layout();
      if (store_spec_.has_value()) {
        offload::StoreHostExpertsOptions options;
        options.host_cache_experts = host_cache_experts_ > 0
                                         ? static_cast<size_t>(host_cache_experts_)
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

    const int64_t vocab = config_.vocab_size;
    SY_ASSIGN_OR_RETURN(auto decoder,
                        KvCacheDecoder::Create(model, prompt_len_ + gen_len_, batch_, &*provider));
    std::vector<double> prefill_times, decode_times;
    for (int rep = 0; rep < repeats_; ++rep) {
      decoder->Reset();
      std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(batch_));
      const ExpertProviderStats at_start = provider->stats();
      const auto start = Clock::now();
      for (int b = 0; b < batch_; ++b) {
        SY_ASSIGN_OR_RETURN(std::vector<float> logits,
                            decoder->Prefill(b, prompts_[static_cast<size_t>(b)]));
        tokens[static_cast<size_t>(b)].push_back(
            Argmax(logits.data() + (logits.size() - static_cast<size_t>(vocab)), vocab));
      }
      const double prefill_s = Seconds(start);
      const ExpertProviderStats after_prefill = provider->stats();
      const auto decode_start = Clock::now();
      for (int step = 1; step < gen_len_; ++step) {
        std::vector<int32_t> last;
        for (const auto& seq : tokens) last.push_back(seq.back());
        SY_ASSIGN_OR_RETURN(std::vector<float> logits, decoder->Decode(last));
        for (int b = 0; b < batch_; ++b) {
          tokens[static_cast<size_t>(b)].push_back(
              Argmax(logits.data() + static_cast<size_t>(b) * static_cast<size_t>(vocab), vocab));
        }
      }
      const double decode_s = Seconds(decode_start);
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
    const double n = repeats_;
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
    return r.prefill_s > 0 ? batch_ * static_cast<double>(prompt_len_) / r.prefill_s : 0.0;
  }
  double DecodeTps(const PolicyResult& r) const {
    return r.decode_s > 0 ? batch_ * static_cast<double>(gen_len_ - 1) / r.decode_s : 0.0;
  }

  void PrintTable(const std::vector<PolicyResult>& results,
                  const std::vector<std::string>& mismatches) const {
    const PolicyResult* res = Resident(results);
    auto opt = [](const std::optional<double>& v) { return v ? Fixed(*v, 3) : std::string("-"); };
    auto ratio = [](double a, double b) { return b > 0 ? Fixed(a / b, 3) : std::string("-"); };
    std::printf(
        "| policy | prefill tok/s | decode tok/s | TTFT ms | stall prefill s | stall decode s | "
        "H->D MiB | device hit | host hit | predictor acc | peak device MiB | prefill vs "
        "resident | decode vs resident | TTFT vs resident | peak vs resident | tokens |\n");
    std::printf(
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | "
        "--- | --- |\n");
    for (const PolicyResult& r : results) {
      if (!r.error.empty()) {
        std::printf("| %s | %s | | | | | | | | | | | | | | |\n", r.policy.c_str(),
                    r.did_not_fit ? "does not fit the device" : ("failed: " + r.error).c_str());
        continue;
      }
      const bool same =
          std::find(mismatches.begin(), mismatches.end(), r.policy) == mismatches.end();
      std::printf(
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
  }

  Status WriteJson(const std::vector<PolicyResult>& results,
                   const std::vector<std::vector<int32_t>>& reference,
                   const std::vector<std::string>& mismatches,
                   const std::vector<std::string>& failures) const {
    using nlohmann::json;
    const PolicyResult* res = Resident(results);
    auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(nullptr); };
    json out;
    out["model"] = model_dir_;
    out["config"] = config_.ToString();
    out["setup"] = {{"device", device_},
                    {"dtype", std::string(DTypeName(dtype_value_))},
                    {"prompt_len", prompt_len_},
                    {"gen_len", gen_len_},
                    {"batch", batch_},
                    {"repeats", repeats_},
                    {"seed", seed_},
                    {"link_gbps", sim_.link_gbps},
                    {"link_latency_us", sim_.link_latency_us},
                    {"device_mem", sim_.memory_bytes},
                    {"device_slots", policy_options_.device_slots},
                    {"device_cache", policy_options_.device_cache},
                    {"store", store_},
                    {"host_cache_experts", host_cache_experts_},
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
    std::ofstream file(json_, std::ios::trunc);
    file << out.dump(2) << "\n";
    file.close();
    if (!file) return IOError("cannot write " + json_);
    return Status::Ok();
  }

  std::string model_dir_;
  std::string policies_ = "resident,ondemand";
  int prompt_len_ = 16;
  int gen_len_ = 16;
  int batch_ = 1;
  std::string device_ = "sim";
  SimOptions sim_;
  ExpertPolicyOptions policy_options_;
  std::string store_;
  int64_t host_cache_experts_ = 0;
  std::string dtype_ = "bf16";
  bool pregate_ = false;
  int repeats_ = 1;
  unsigned seed_ = 0;
  int threads_ = 0;
  std::string json_;

  DType dtype_value_ = DType::kBF16;
  Device device_value_ = Device::Cpu();
  std::optional<offload::ExpertStoreSpec> store_spec_;
  ModelConfig config_;
  std::vector<std::vector<int32_t>> prompts_;
  int64_t expert_bytes_ = 0;
};

}  // namespace

SY_REGISTER_COMMAND("bench infer",
                    "Expert policies side by side: prefill/decode tokens/s, TTFT, transfer stall, "
                    "bytes moved, cache hit rates, peak device memory; tokens checked against "
                    "resident",
                    BenchInferCommand);

}  // namespace sy::launcher
