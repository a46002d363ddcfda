// ServerMetrics: what GET /metrics reports, in the Prometheus text format (version 0.0.4).
//
// The server counts its HTTP side here as requests come and go (requests by endpoint and status
// code, requests in flight, time to first token); the engine's side (tokens, tokens/s, queue
// depth, KV-cache use, the expert cache's hit rate per tier, bytes moved) is an EngineSnapshot
// read on the engine thread (EngineThread::Call) when the metrics are asked for. Every name starts
// with switchyard_; docs/serving.md lists them.
//
// Ownership: values. Thread-safety: ServerMetrics' members may be called from any thread (a mutex
// guards the counters); Snapshot must run on the engine thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "inference/expert_provider.h"
#include "inference/generate_engine.h"
#include "runtime/core/mutex.h"

namespace sy::serving {

// The engine's figures at one moment.
struct EngineSnapshot {
  GenerateStats stats;
  int running = 0;             // requests in the batch
  int waiting = 0;             // requests in the engine waiting for a slot
  int queued = 0;              // requests submitted, not yet taken by the engine
  int64_t kv_used_tokens = 0;  // tokens held in the KV cache
  int64_t kv_capacity_tokens = 0;
  int64_t kv_bytes = 0;  // the cache's device memory
  std::string policy;
  ExpertProviderStats provider;
  std::map<std::string, double> provider_extra;
};

// Reads the engine, its decoder and its provider: call on the engine thread.
EngineSnapshot Snapshot(GenerateEngine& engine);

class ServerMetrics {
 public:
  void RequestStarted() SY_EXCLUDES(mu_);
  // `code`: the HTTP status answered; ttft_seconds < 0 when no token was produced.
  void RequestFinished(const std::string& endpoint, int code, double ttft_seconds) SY_EXCLUDES(mu_);

  // The Prometheus text of everything, with `engine` (queued requests included).
  std::string Render(const EngineSnapshot& engine) const SY_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  // (endpoint, code) -> count
  std::map<std::pair<std::string, int>, int64_t> requests_ SY_GUARDED_BY(mu_);
  int64_t in_flight_ SY_GUARDED_BY(mu_) = 0;
  double ttft_sum_ SY_GUARDED_BY(mu_) = 0.0;
  int64_t ttft_count_ SY_GUARDED_BY(mu_) = 0;
};

}  // namespace sy::serving
