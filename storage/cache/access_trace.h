// AccessTrace: which experts each step used, per layer. The input of the cache simulator, of the
// policy benchmark and, later, of routing traces recorded from the model.
//
// File format (text, one record per line; docs/storage.md has the full description):
//
//   # switchyard expert trace v1            first line, exactly
//   layers 32 experts 64                    second line: the key space
//   <step> <layer> <expert> [<expert> ...]  the distinct experts `layer` routed to in `step`
//
// Steps are non-decreasing; '#' starts a comment line. A model run records one line per
// (step, layer) from the router's top-k (the union over the step's tokens).
//
// Ownership: values. Thread-safety: values; the functions are reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace sy::storage {

struct Access {
  uint32_t step = 0;
  uint32_t layer = 0;
  uint32_t expert = 0;
};

struct AccessTrace {
  uint32_t num_layers = 0;
  uint32_t num_experts = 0;
  std::vector<Access> accesses;  // in order; all accesses of a step are contiguous

  uint64_t num_keys() const { return uint64_t{num_layers} * num_experts; }
  uint32_t num_steps() const { return accesses.empty() ? 0 : accesses.back().step + 1; }
};

inline constexpr std::string_view kTraceHeader = "# switchyard expert trace v1";

// Parses trace text; `name` (a path) goes into error messages with the line number.
Result<AccessTrace> ParseTrace(std::string_view text, const std::string& name);
Result<AccessTrace> ReadTraceFile(const std::string& path);
std::string FormatTrace(const AccessTrace& trace);
Status WriteTraceFile(const std::string& path, const AccessTrace& trace);

// A synthetic routing trace: each step, each layer routes `tokens_per_step` tokens to `top_k`
// distinct experts drawn from a Zipf(s) popularity over a per-layer random ranking of the experts.
// With drift_every > 0 the ranking of every layer rotates by drift_shift every drift_every steps
// (popularity that moves, as it does between data domains).
struct ZipfTraceOptions {
  uint32_t num_layers = 8;       // Default: 8.
  uint32_t num_experts = 64;     // Default: 64.
  uint32_t steps = 2000;         // Default: 2000.
  uint32_t top_k = 2;            // Default: 2.
  uint32_t tokens_per_step = 4;  // Default: 4.
  double zipf_s = 1.0;           // Default: 1.0 (s = 0 is uniform).
  uint32_t drift_every = 0;      // Default: 0 (stationary).
  uint32_t drift_shift = 1;      // Default: 1.
  uint64_t seed = 1;             // Default: 1.
};
Result<AccessTrace> GenerateZipfTrace(const ZipfTraceOptions& options);

}  // namespace sy::storage
