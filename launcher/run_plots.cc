#include "launcher/run_plots.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "inference/tools/infer_bench_charts.h"
#include "runtime/core/read_file.h"
#include "runtime/plot/chart.h"

namespace sy::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

double Number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

// The metrics lines by step: a resumed run appends, so a later line for a step replaces an
// earlier one. Step lines and evaluation lines (eval_loss) are kept apart.
struct Metrics {
  std::map<int64_t, json> steps;
  std::map<int64_t, json> evals;
};

Result<Metrics> ReadMetrics(const std::string& path, std::vector<std::string>* notes) {
  SY_ASSIGN_OR_RETURN(std::string text, ReadFile(path, kNoFileSizeLimit, "a metrics file"));
  Metrics m;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    const bool last = end == std::string::npos;
    if (last) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number()) {
      if (last) {
        notes->push_back(path + " line " + std::to_string(line_no) +
                         ": cut short (a killed run?), skipped");
        continue;
      }
      return InvalidArgumentError(path + " line " + std::to_string(line_no) +
                                  ": not a JSON object with a \"step\"; is it a metrics file "
                                  "of `switchyard train` (log.metrics)?");
    }
    const auto step = j["step"].get<int64_t>();
    std::map<int64_t, json>& lines = j.contains("eval_loss") ? m.evals : m.steps;
    lines[step] = std::move(j);
  }
  return m;
}

plot::Series SeriesOf(const std::map<int64_t, json>& lines, const char* key, std::string name) {
  plot::Series s{.name = std::move(name)};
  for (const auto& [step, j] : lines) {
    const double v = Number(j, key);
    if (!std::isfinite(v)) continue;
    s.x.push_back(static_cast<double>(step));
    s.y.push_back(v);
  }
  return s;
}

std::vector<std::pair<std::string, plot::Chart>> TrainingCharts(const Metrics& m,
                                                                std::vector<std::string>* notes) {
  std::vector<std::pair<std::string, plot::Chart>> charts;
  plot::LineChart loss{.title = "loss", .x_label = "step", .y_label = "loss"};
  for (plot::Series s :
       {SeriesOf(m.steps, "loss", "train"), SeriesOf(m.evals, "eval_loss", "eval")}) {
    if (!s.x.empty()) loss.series.push_back(std::move(s));
  }
  if (!loss.series.empty()) charts.emplace_back("loss", std::move(loss));

  // Per task: eval_tasks {"copy": {"exact_match": ..}, ..}, then the total.
  plot::LineChart accuracy{
      .title = "exact match on held-out inputs", .x_label = "step", .y_label = "exact match"};
  std::map<std::string, plot::Series> tasks;
  std::vector<std::string> task_order;
  for (const auto& [step, j] : m.evals) {
    auto it = j.find("eval_tasks");
    if (it == j.end() || !it->is_object()) continue;
    for (const auto& [task, stats] : it->items()) {
      if (!stats.is_object()) continue;
      const double v = Number(stats, "exact_match");
      if (!std::isfinite(v)) continue;
      if (!tasks.count(task)) task_order.push_back(task);
      plot::Series& s = tasks[task];
      s.name = task;
      s.x.push_back(static_cast<double>(step));
      s.y.push_back(v);
    }
  }
  for (const std::string& task : task_order) accuracy.series.push_back(std::move(tasks[task]));
  plot::Series all = SeriesOf(m.evals, "eval_exact_match", "all");
  if (!all.x.empty()) accuracy.series.push_back(std::move(all));
  if (!accuracy.series.empty()) {
    charts.emplace_back("eval_accuracy", std::move(accuracy));
  } else {
    notes->push_back("eval_accuracy: no evaluation in the metrics (train.eval_every)");
  }

  plot::LineChart speed{.title = "training throughput", .x_label = "step", .y_label = "tokens/s"};
  plot::Series tps = SeriesOf(m.steps, "tokens_per_s", "");
  if (!tps.x.empty()) {
    speed.series.push_back(std::move(tps));
    charts.emplace_back("tokens_per_s", std::move(speed));
  }

  // expert_load: [moe layer][expert] token-slots per logged step, summed, then shares per layer.
  std::vector<std::vector<double>> load;
  for (const auto& [step, j] : m.steps) {
    auto it = j.find("expert_load");
    if (it == j.end() || !it->is_array()) continue;
    if (load.size() < it->size()) load.resize(it->size());
    for (size_t l = 0; l < it->size(); ++l) {
      const json& layer = (*it)[l];
      if (!layer.is_array()) continue;
      if (load[l].size() < layer.size()) load[l].resize(layer.size(), 0.0);
      for (size_t e = 0; e < layer.size(); ++e) {
        if (layer[e].is_number()) load[l][e] += layer[e].get<double>();
      }
    }
  }
  if (load.empty()) {
    notes->push_back("expert_load: no expert_load in the metrics (a dense model?)");
  } else {
    plot::Heatmap map{.title = "expert load (share of each layer's token-slots)",
                      .x_label = "expert",
                      .y_label = "MoE layer",
                      .value_label = "share"};
    size_t experts = 0;
    for (const auto& layer : load) experts = std::max(experts, layer.size());
    for (size_t e = 0; e < experts; ++e) map.column_labels.push_back(std::to_string(e));
    for (size_t l = 0; l < load.size(); ++l) {
      std::vector<double> row(experts, NAN);
      double total = 0;
      for (double v : load[l]) total += v;
      for (size_t e = 0; e < load[l].size(); ++e) row[e] = total > 0 ? load[l][e] / total : NAN;
      map.row_labels.push_back(std::to_string(l));
      map.values.push_back(std::move(row));
    }
    charts.emplace_back("expert_load", std::move(map));
  }
  return charts;
}

}  // namespace

Result<PlotRunResult> PlotRun(const PlotRunOptions& options) {
  const fs::path run(options.run_dir);
  std::error_code ec;
  if (!fs::is_directory(run, ec)) {
    return NotFoundError(options.run_dir +
                         " is not a directory; give the run directory "
                         "(checkpoint.dir) of `switchyard train`");
  }
  PlotRunResult result;
  std::vector<std::pair<std::string, plot::Chart>> charts;

  const std::string metrics =
      options.metrics.empty() ? (run / "metrics.jsonl").string() : options.metrics;
  if (fs::exists(metrics, ec)) {
    SY_ASSIGN_OR_RETURN(Metrics m, ReadMetrics(metrics, &result.notes));
    charts = TrainingCharts(m, &result.notes);
  } else {
    result.notes.push_back(metrics + ": no metrics (train with --set log.metrics=" + metrics + ")");
  }

  std::vector<fs::path> jsons;
  for (const auto& entry : fs::directory_iterator(run, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json")
      jsons.push_back(entry.path());
  }
  std::sort(jsons.begin(), jsons.end());
  for (const fs::path& path : jsons) {
    Result<std::string> text = ReadFile(path.string());
    if (!text.ok()) continue;
    json j = json::parse(*text, nullptr, false);
    if (j.is_discarded() || !IsInferBenchJson(j)) continue;
    const std::string stem = path.stem().string();
    SY_ASSIGN_OR_RETURN(auto bench, InferBenchCharts(j, " (" + stem + ")"));
    for (auto& [name, chart] : bench) charts.emplace_back(stem + "_" + name, std::move(chart));
  }
  if (charts.empty()) {
    return NotFoundError(options.run_dir + ": nothing to plot: no metrics (" + metrics +
                         ") and no `bench infer --json` result (*.json)");
  }

  const fs::path out = options.out_dir.empty() ? run / "plots" : fs::path(options.out_dir);
  fs::create_directories(out, ec);
  if (ec) return IOError("cannot create " + out.string() + ": " + ec.message());
  for (const auto& [name, chart] : charts) {
    const std::string stem = (out / name).string();
    SY_RETURN_IF_ERROR(plot::WriteChart(chart, stem));
    result.written.push_back(stem + ".png");
    result.written.push_back(stem + ".svg");
  }
  return result;
}

}  // namespace sy::launcher
