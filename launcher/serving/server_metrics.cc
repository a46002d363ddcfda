#include "launcher/serving/server_metrics.h"

#include <cstdio>

#include "inference/kv_cache_decoder.h"

namespace sy::serving {
namespace {

// One metric: its HELP and TYPE lines and its samples.
class Writer {
 public:
  void Metric(const char* name, const char* type, const char* help) {
    out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, double value, const std::string& labels = "") {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", value);
    out_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + buf + "\n";
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

EngineSnapshot Snapshot(GenerateEngine& engine) {
  EngineSnapshot s;
  s.stats = engine.stats();
  s.running = engine.running();
  s.waiting = engine.waiting();
  s.kv_used_tokens = engine.cached_tokens();
  const KvCache& cache = engine.decoder().cache();
  s.kv_capacity_tokens = static_cast<int64_t>(cache.batch()) * cache.max_seq_len();
  s.kv_bytes = static_cast<int64_t>(cache.bytes());
  if (ExpertProvider* provider = engine.decoder().provider()) {
    s.policy = provider->name();
    s.provider = provider->stats();
    s.provider_extra = provider->extra_metrics();
  }
  return s;
}

void ServerMetrics::RequestStarted() {
  MutexLock lock(&mu_);
  ++in_flight_;
}

void ServerMetrics::RequestFinished(const std::string& endpoint, int code, double ttft_seconds) {
  MutexLock lock(&mu_);
  --in_flight_;
  ++requests_[{endpoint, code}];
  if (ttft_seconds >= 0) {
    ttft_sum_ += ttft_seconds;
    ++ttft_count_;
  }
}

std::string ServerMetrics::Render(const EngineSnapshot& e) const {
  Writer w;
  {
    MutexLock lock(&mu_);
    w.Metric("switchyard_requests_total", "counter",
             "HTTP requests answered, by endpoint and status code");
    for (const auto& [key, count] : requests_) {
      w.Sample("switchyard_requests_total", static_cast<double>(count),
               "endpoint=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"");
    }
    w.Metric("switchyard_requests_in_flight", "gauge", "Generation requests being answered");
    w.Sample("switchyard_requests_in_flight", static_cast<double>(in_flight_));
    w.Metric("switchyard_time_to_first_token_seconds", "summary",
             "From a request reaching the engine to its first token");
    w.Sample("switchyard_time_to_first_token_seconds_sum", ttft_sum_);
    w.Sample("switchyard_time_to_first_token_seconds_count", static_cast<double>(ttft_count_));
  }
  const GenerateStats& s = e.stats;
  w.Metric("switchyard_engine_requests_total", "counter", "Requests the engine finished");
  w.Sample("switchyard_engine_requests_total", static_cast<double>(s.requests));
  w.Metric("switchyard_prompt_tokens_total", "counter", "Prompt tokens prefilled");
  w.Sample("switchyard_prompt_tokens_total", static_cast<double>(s.prompt_tokens));
  w.Metric("switchyard_generated_tokens_total", "counter", "Tokens generated");
  w.Sample("switchyard_generated_tokens_total", static_cast<double>(s.generated_tokens));
  w.Metric("switchyard_decode_steps_total", "counter", "Decode steps over the running batch");
  w.Sample("switchyard_decode_steps_total", static_cast<double>(s.decode_steps));
  w.Metric("switchyard_prefill_seconds_total", "counter", "Time spent in prefill");
  w.Sample("switchyard_prefill_seconds_total", s.prefill_seconds);
  w.Metric("switchyard_decode_seconds_total", "counter", "Time spent in decode steps");
  w.Sample("switchyard_decode_seconds_total", s.decode_seconds);
  w.Metric("switchyard_decode_tokens_per_second", "gauge",
           "Decode tokens per second of decode time, since the start");
  w.Sample("switchyard_decode_tokens_per_second",
           s.decode_seconds > 0 ? static_cast<double>(s.decode_tokens) / s.decode_seconds : 0.0);
  w.Metric("switchyard_prefill_tokens_per_second", "gauge",
           "Prompt tokens per second of prefill time, since the start");
  w.Sample("switchyard_prefill_tokens_per_second",
           s.prefill_seconds > 0 ? static_cast<double>(s.prompt_tokens) / s.prefill_seconds : 0.0);
  w.Metric("switchyard_running_requests", "gauge", "Requests in the running batch");
  w.Sample("switchyard_running_requests", e.running);
  w.Metric("switchyard_queue_depth", "gauge", "Requests waiting for a batch slot");
  w.Sample("switchyard_queue_depth", e.waiting + e.queued);
  w.Metric("switchyard_kv_cache_used_tokens", "gauge", "Tokens held in the KV cache");
  w.Sample("switchyard_kv_cache_used_tokens", static_cast<double>(e.kv_used_tokens));
  w.Metric("switchyard_kv_cache_capacity_tokens", "gauge", "Tokens the KV cache can hold");
  w.Sample("switchyard_kv_cache_capacity_tokens", static_cast<double>(e.kv_capacity_tokens));
  w.Metric("switchyard_kv_cache_usage_ratio", "gauge", "Used over capacity");
  w.Sample("switchyard_kv_cache_usage_ratio",
           e.kv_capacity_tokens > 0
               ? static_cast<double>(e.kv_used_tokens) / static_cast<double>(e.kv_capacity_tokens)
               : 0.0);
  w.Metric("switchyard_kv_cache_bytes", "gauge", "Device memory of the KV cache");
  w.Sample("switchyard_kv_cache_bytes", static_cast<double>(e.kv_bytes));
  // The expert cache per tier: the device tier's hit rate is the policy's own figure where it
  // keeps one, 1 for resident (every expert is on the device); the host tier holds every expert
  // (pinned host memory), so whatever reaches it hits.
  const std::string policy = "policy=\"" + e.policy + "\"";
  w.Metric("switchyard_expert_cache_hit_rate", "gauge",
           "Expert lookups served by a tier without going to the next one, by tier");
  if (auto it = e.provider_extra.find("device_cache_hit_rate"); it != e.provider_extra.end()) {
    w.Sample("switchyard_expert_cache_hit_rate", it->second, policy + ",tier=\"device\"");
  } else if (e.policy == "resident") {
    w.Sample("switchyard_expert_cache_hit_rate", 1.0, policy + ",tier=\"device\"");
  }
  if (e.policy != "resident" && !e.policy.empty()) {
    w.Sample("switchyard_expert_cache_hit_rate", 1.0, policy + ",tier=\"host\"");
  }
  w.Metric("switchyard_expert_bytes_moved_total", "counter",
           "Expert weight bytes copied host to device");
  w.Sample("switchyard_expert_bytes_moved_total",
           static_cast<double>(e.provider.bytes_host_to_device),
           policy + ",direction=\"host_to_device\"");
  w.Metric("switchyard_expert_stall_seconds_total", "counter",
           "Time the compute stream waited for expert weights");
  w.Sample("switchyard_expert_stall_seconds_total", e.provider.stall_seconds, policy);
  w.Metric("switchyard_experts_run_total", "counter", "(layer, expert) pairs computed");
  w.Sample("switchyard_experts_run_total", static_cast<double>(e.provider.experts_run), policy);
  return w.Take();
}

}  // namespace sy::serving
