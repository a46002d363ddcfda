#include "inference/tools/infer_bench_charts.h"

#include <cmath>
#include <filesystem>

namespace sy {
namespace {

// A number, or NaN for null and anything else (a missing figure draws no bar).
double Number(const nlohmann::json& row, const char* key) {
  auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : NAN;
}

}  // namespace

bool IsInferBenchJson(const nlohmann::json& json) {
  return json.is_object() && json.contains("policies") && json["policies"].is_array();
}

Result<std::vector<std::pair<std::string, plot::Chart>>> InferBenchCharts(
    const nlohmann::json& json, const std::string& title_suffix) {
  if (!IsInferBenchJson(json)) {
    return InvalidArgumentError(
        "not a `switchyard bench infer --json` result: no \"policies\" array");
  }
  std::vector<std::string> policies;
  plot::BarGroup prefill{.name = "prefill"}, decode{.name = "decode"};
  plot::BarGroup device{.name = "device"}, host{.name = "host"};
  for (const nlohmann::json& row : json["policies"]) {
    if (!row.is_object() || !row.value("ok", false)) continue;
    policies.push_back(row.value("policy", std::string("?")));
    prefill.values.push_back(Number(row, "prefill_tokens_per_s"));
    decode.values.push_back(Number(row, "decode_tokens_per_s"));
    device.values.push_back(Number(row, "device_cache_hit_rate"));
    host.values.push_back(Number(row, "host_cache_hit_rate"));
  }
  if (policies.empty())
    return InvalidArgumentError("the bench infer result has no policy that ran");
  std::vector<std::pair<std::string, plot::Chart>> charts;
  charts.emplace_back("bench_infer_tokens_per_s",
                      plot::BarChart{.title = "tokens/s by expert policy" + title_suffix,
                                     .y_label = "tokens/s",
                                     .categories = policies,
                                     .groups = {prefill, decode}});
  auto any = [](const plot::BarGroup& g) {
    for (double v : g.values) {
      if (std::isfinite(v)) return true;
    }
    return false;
  };
  if (any(device) || any(host)) {
    plot::BarChart hits{.title = "expert cache hit rate per tier" + title_suffix,
                        .y_label = "hit rate",
                        .categories = policies};
    if (any(device)) hits.groups.push_back(device);
    if (any(host)) hits.groups.push_back(host);
    charts.emplace_back("cache_hit_rates", std::move(hits));
  }
  return charts;
}

Result<std::vector<std::string>> WriteInferBenchCharts(const nlohmann::json& json,
                                                       const std::string& dir) {
  SY_ASSIGN_OR_RETURN(auto charts, InferBenchCharts(json));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError("cannot create " + dir + ": " + ec.message());
  std::vector<std::string> written;
  for (const auto& [stem, chart] : charts) {
    const std::string path = (std::filesystem::path(dir) / stem).string();
    SY_RETURN_IF_ERROR(plot::WriteChart(chart, path));
    written.push_back(path + ".png");
    written.push_back(path + ".svg");
  }
  return written;
}

}  // namespace sy
