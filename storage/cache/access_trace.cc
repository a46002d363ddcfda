#include "storage/cache/access_trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "runtime/core/file_creation.h"
#include "runtime/core/read_file.h"

namespace sy::storage {
namespace {

Status LineError(const std::string& name, size_t line, const std::string& what) {
  return InvalidArgumentError("trace " + name + " line " + std::to_string(line) + ": " + what);
}

// Splits on spaces and tabs.
std::vector<std::string_view> Fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool ParseU32(std::string_view text, uint32_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

Result<AccessTrace> ParseTrace(std::string_view text, const std::string& name) {
  AccessTrace trace;
  size_t line_no = 0;
  size_t pos = 0;
  bool header_seen = false;
  bool shape_seen = false;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!header_seen) {
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line != kTraceHeader) {
        return LineError(name, line_no, "expected the header '" + std::string(kTraceHeader) + "'");
      }
      header_seen = true;
      continue;
    }
    if (!line.empty() && line[0] == '#') continue;
    std::vector<std::string_view> fields = Fields(line);
    if (fields.empty()) continue;
    if (!shape_seen) {
      if (fields.size() != 4 || fields[0] != "layers" || fields[2] != "experts" ||
          !ParseU32(fields[1], &trace.num_layers) || !ParseU32(fields[3], &trace.num_experts) ||
          trace.num_layers == 0 || trace.num_experts == 0) {
        return LineError(name, line_no, "expected 'layers <L> experts <E>' with L, E >= 1");
      }
      shape_seen = true;
      continue;
    }
    if (fields.size() < 3) {
      return LineError(name, line_no, "expected '<step> <layer> <expert> [<expert> ...]'");
    }
    uint32_t step = 0;
    uint32_t layer = 0;
    if (!ParseU32(fields[0], &step) || !ParseU32(fields[1], &layer)) {
      return LineError(name, line_no, "step and layer must be non-negative integers");
    }
    if (!trace.accesses.empty() && step < trace.accesses.back().step) {
      return LineError(name, line_no,
                       "step " + std::to_string(step) + " comes after step " +
                           std::to_string(trace.accesses.back().step) +
                           "; steps must not decrease");
    }
    if (layer >= trace.num_layers) {
      return LineError(
          name, line_no,
          "layer " + std::to_string(layer) + " >= layers " + std::to_string(trace.num_layers));
    }
    for (size_t i = 2; i < fields.size(); ++i) {
      uint32_t expert = 0;
      if (!ParseU32(fields[i], &expert) || expert >= trace.num_experts) {
        return LineError(name, line_no,
                         "expert '" + std::string(fields[i]) + "' is not in 0.." +
                             std::to_string(trace.num_experts - 1));
      }
      trace.accesses.push_back(Access{step, layer, expert});
    }
  }
  if (!header_seen || !shape_seen) {
    return InvalidArgumentError("trace " + name +
                                ": missing the header and the 'layers <L> experts <E>' line");
  }
  return trace;
}

Result<AccessTrace> ReadTraceFile(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status().WithContext("trace");
  return ParseTrace(*text, path);
}

std::string FormatTrace(const AccessTrace& trace) {
  std::ostringstream out;
  out << kTraceHeader << "\n";
  out << "layers " << trace.num_layers << " experts " << trace.num_experts << "\n";
  size_t i = 0;
  while (i < trace.accesses.size()) {
    const Access& first = trace.accesses[i];
    out << first.step << " " << first.layer;
    while (i < trace.accesses.size() && trace.accesses[i].step == first.step &&
           trace.accesses[i].layer == first.layer) {
      out << " " << trace.accesses[i].expert;
      ++i;
    }
    out << "\n";
  }
  return out.str();
}

Status WriteTraceFile(const std::string& path, const AccessTrace& trace) {
  return WriteFileReplacing(path, FormatTrace(trace)).WithContext("trace " + path);
}

Result<AccessTrace> GenerateZipfTrace(const ZipfTraceOptions& o) {
  if (o.num_layers == 0 || o.num_experts == 0 || o.top_k == 0 || o.top_k > o.num_experts ||
      o.tokens_per_step == 0 || o.zipf_s < 0) {
    return InvalidArgumentError(
        "zipf trace: need layers, experts, tokens_per_step >= 1, 1 <= top_k <= experts, s >= 0");
  }
  std::mt19937_64 rng(o.seed);
  std::vector<double> cdf(o.num_experts);
  double total = 0;
  for (uint32_t r = 0; r < o.num_experts; ++r) {
    total += 1.0 / std::pow(static_cast<double>(r + 1), o.zipf_s);
    cdf[r] = total;
  }
  for (double& c : cdf) c /= total;
  std::vector<std::vector<uint32_t>> ranking(o.num_layers, std::vector<uint32_t>(o.num_experts));
  for (auto& layer_ranking : ranking) {
    std::iota(layer_ranking.begin(), layer_ranking.end(), 0u);
    std::shuffle(layer_ranking.begin(), layer_ranking.end(), rng);
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto draw_rank = [&] {
    auto it = std::lower_bound(cdf.begin(), cdf.end(), uniform(rng));
    return static_cast<uint32_t>(std::min<size_t>(it - cdf.begin(), o.num_experts - 1));
  };
  AccessTrace trace;
  trace.num_layers = o.num_layers;
  trace.num_experts = o.num_experts;
  uint32_t rotation = 0;
  for (uint32_t step = 0; step < o.steps; ++step) {
    if (o.drift_every > 0 && step > 0 && step % o.drift_every == 0) {
      rotation = (rotation + o.drift_shift) % o.num_experts;
    }
    for (uint32_t layer = 0; layer < o.num_layers; ++layer) {
      std::set<uint32_t> used;
      for (uint32_t token = 0; token < o.tokens_per_step; ++token) {
        std::set<uint32_t> chosen;
        while (chosen.size() < o.top_k) {
          chosen.insert(ranking[layer][(draw_rank() + rotation) % o.num_experts]);
        }
        used.insert(chosen.begin(), chosen.end());
      }
      for (uint32_t expert : used) trace.accesses.push_back(Access{step, layer, expert});
    }
  }
  return trace;
}

}  // namespace sy::storage
