#include "inference/offload/latency_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <utility>

#include "inference/offload/device_expert_cache.h"
#include "inference/offload/mixed_expert_runner.h"
#include "inference/offload/transfer_engine.h"
#include "runtime/core/check.h"
#include "runtime/core/statistics.h"

namespace sy::offload {
namespace {

double Interpolate(const std::vector<LatencyPoint>& points, int64_t rows) {
  SY_CHECK(!points.empty()) << "ExpertLatencyModel: no points";
  if (points.size() == 1 || rows <= points.front().rows) {
    if (points.size() == 1 && points.front().rows > 0 && rows > points.front().rows) {
      // One point: proportional beyond it.
      return points.front().seconds * static_cast<double>(rows) /
             static_cast<double>(points.front().rows);
    }
    return points.front().seconds;
  }
  size_t hi = 1;
  while (hi + 1 < points.size() && points[hi].rows < rows) ++hi;
  const LatencyPoint& a = points[hi - 1];
  const LatencyPoint& b = points[hi];
  if (b.rows == a.rows) return b.seconds;
  const double t = static_cast<double>(rows - a.rows) / static_cast<double>(b.rows - a.rows);
  // Past the last point the slope of the last two continues (never below the last value).
  return std::max(a.seconds + t * (b.seconds - a.seconds), rows > b.rows ? b.seconds : 0.0);
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

const char* ExpertPlacementName(ExpertPlacement placement) {
  switch (placement) {
    case ExpertPlacement::kResident:
      return "resident";
    case ExpertPlacement::kFetch:
      return "fetch";
    case ExpertPlacement::kCpu:
      return "cpu";
  }
  return "?";
}

double ExpertLatencyModel::CpuSeconds(int64_t rows) const { return Interpolate(cpu, rows); }
double ExpertLatencyModel::DeviceSeconds(int64_t rows) const { return Interpolate(device, rows); }

double ExpertLatencyModel::LinkBytesPerSecond() const {
  return transfer_seconds > 0 ? static_cast<double>(expert_bytes) / transfer_seconds : 0.0;
}

double ExpertLatencyModel::CpuBytesPerSecond() const {
  const double seconds = CpuSeconds(1);
  return seconds > 0 ? static_cast<double>(expert_bytes) / seconds : 0.0;
}

std::string ExpertLatencyModel::ToString() const {
  std::string out;
  char buf[128];
  std::snprintf(buf, sizeof(buf),
                "transfer %.3f ms (%.2f GB/s, %.2f MiB); cpu(s) ms:", transfer_seconds * 1e3,
                LinkBytesPerSecond() * 1e-9, static_cast<double>(expert_bytes) / (1 << 20));
  out += buf;
  for (const LatencyPoint& p : cpu) {
    std::snprintf(buf, sizeof(buf), " %lld:%.3f", static_cast<long long>(p.rows), p.seconds * 1e3);
    out += buf;
  }
  out += "; device(s) ms:";
  for (const LatencyPoint& p : device) {
    std::snprintf(buf, sizeof(buf), " %lld:%.3f", static_cast<long long>(p.rows), p.seconds * 1e3);
    out += buf;
  }
  return out;
}

ExpertPlacement FiddlerPlacement(const ExpertLatencyModel& model, int64_t rows, bool resident) {
  if (resident) return ExpertPlacement::kResident;
  return model.CpuSeconds(rows) > model.DeviceSeconds(rows) + model.TransferSeconds()
             ? ExpertPlacement::kFetch
             : ExpertPlacement::kCpu;
}

int HotColdCount(double alpha, double link_bytes_per_second, double cpu_bytes_per_second,
                 int active) {
  SY_CHECK_GE(alpha, 0.0) << "HotColdCount: alpha";
  const double total = link_bytes_per_second + cpu_bytes_per_second;
  if (active <= 0 || total <= 0) return 0;
  const double h = alpha * link_bytes_per_second / total * static_cast<double>(active);
  return static_cast<int>(std::clamp(std::floor(h + 0.5), 0.0, static_cast<double>(active)));
}

double ReplayHotCold(const ExpertLatencyModel& model, double alpha,
                     std::span<const std::vector<int64_t>> batches) {
  const double link = model.LinkBytesPerSecond();
  const double cpu = model.CpuBytesPerSecond();
  double total = 0.0;
  std::vector<int64_t> rows;
  for (const std::vector<int64_t>& batch : batches) {
    rows.clear();
    for (int64_t r : batch) {
      if (r > 0) rows.push_back(r);
    }
    std::sort(rows.begin(), rows.end(), std::greater<>());
    const int h = HotColdCount(alpha, link, cpu, static_cast<int>(rows.size()));
    double device_side = 0.0, cpu_side = 0.0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (static_cast<int>(i) < h) {
        device_side += model.TransferSeconds() + model.DeviceSeconds(rows[i]);
      } else {
        cpu_side += model.CpuSeconds(rows[i]);
      }
    }
    total += std::max(device_side, cpu_side);
  }
  return total;
}

double TuneHotColdAlpha(const ExpertLatencyModel& model,
                        std::span<const std::vector<int64_t>> batches,
                        std::span<const double> grid) {
  if (batches.empty()) return 1.0;
  std::vector<double> alphas(grid.begin(), grid.end());
  if (alphas.empty()) {
    for (int i = 0; i <= 16; ++i) alphas.push_back(0.25 * i);
    const double link = model.LinkBytesPerSecond();
    if (link > 0) alphas.push_back((link + model.CpuBytesPerSecond()) / link);  // all on device
  }
  double best_alpha = 1.0, best = -1.0;
  for (const double alpha : alphas) {
    const double t = ReplayHotCold(model, alpha, batches);
    const bool better =
        best < 0 || t < best * (1 - 1e-9) ||
        (t <= best * (1 + 1e-9) && std::fabs(alpha - 1) < std::fabs(best_alpha - 1));
    if (better) {
      best = t;
      best_alpha = alpha;
    }
  }
  return best_alpha;
}

Result<ExpertLatencyModel> CalibrateLatencyModel(Backend& backend, HostExpertSource& host,
                                                 CpuExpertExecutor& cpu,
                                                 const CalibrationOptions& options) {
  const ExpertLayout& layout = host.layout();
  if (!layout.Contains(options.key)) {
    return InvalidArgumentError("CalibrateLatencyModel: expert " + options.key.ToString() +
                                " is outside the layout");
  }
  if (options.rows.empty() || options.repeats < 1) {
    return InvalidArgumentError("CalibrateLatencyModel: no rows to measure or repeats < 1");
  }
  std::vector<int64_t> rows = options.rows;
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  if (rows.front() < 1) return InvalidArgumentError("CalibrateLatencyModel: rows must be >= 1");

  DeviceExpertCacheOptions cache_options;
  cache_options.num_slots = 1;
  cache_options.policy = DeviceCachePolicy::kNone;
  SY_ASSIGN_OR_RETURN(auto cache, DeviceExpertCache::Create(backend, layout, cache_options));
  auto engine = std::make_unique<TransferEngine>(backend, host, *cache);
  ExpertLatencyModel model;
  model.expert_bytes = layout.expert_bytes();
  {
    MixedExpertRunner runner(backend, cache.get(), engine.get(), cpu);
    const int64_t max_rows = rows.back();
    SY_ASSIGN_OR_RETURN(Tensor xs, backend.Allocate(DType::kF32, Shape{max_rows, layout.hidden}));
    SY_ASSIGN_OR_RETURN(Tensor ys, backend.Allocate(DType::kF32, Shape{max_rows, layout.hidden}));
    backend.Fill(xs, 0.01f);
    Stream& compute = backend.compute_stream();

    // The link: the expert fetched into the (empty) slot, then dropped (kNone), repeats times.
    std::vector<double> transfers;
    SlotHandle pin;
    for (int r = 0; r < options.repeats; ++r) {
      pin.Release();
      // The engine drops its own pin just after a fill completes; until then the expert stays in
      // the slot and the next Enqueue would be a hit, not a copy.
      for (int wait = 0; wait < 100000 && cache->Lookup(options.key) >= 0; ++wait) {
        std::this_thread::sleep_for(std::chrono::microseconds(10));
      }
      const uint64_t copies_before = engine->stats().tasks_queued;
      const auto t0 = std::chrono::steady_clock::now();
      SY_ASSIGN_OR_RETURN(pin, engine->Enqueue(TransferPriority::kHigh, options.key));
      SY_RETURN_IF_ERROR(engine->Wait(pin));
      if (engine->stats().tasks_queued == copies_before) {
        return InternalError(
            "CalibrateLatencyModel: the expert stayed in the device slot, so no "
            "copy could be timed");
      }
      transfers.push_back(Since(t0));
    }
    model.transfer_seconds = Median(transfers);

    // cpu(s) and device(s) through the runner's own paths (the pin keeps the expert resident).
    std::vector<int64_t> groups(static_cast<size_t>(layout.num_experts), 0);
    for (const ExpertPlacement where : {ExpertPlacement::kCpu, ExpertPlacement::kResident}) {
      std::vector<ExpertPlacement> placement(groups.size(), where);
      for (const int64_t s : rows) {
        groups[options.key.expert] = s;
        const Tensor x = xs.Slice(0, s);
        const Tensor y = ys.Slice(0, s);
        std::vector<double> times;
        for (int r = 0; r <= options.repeats; ++r) {  // the first run warms up
          const auto t0 = std::chrono::steady_clock::now();
          SY_RETURN_IF_ERROR(
              runner.Run(static_cast<int>(options.key.layer), x, groups, placement, y));
          backend.SynchronizeStream(compute);
          if (r > 0) times.push_back(Since(t0));
        }
        (where == ExpertPlacement::kCpu ? model.cpu : model.device).push_back({s, Median(times)});
      }
    }
  }
  engine.reset();
  return model;
}

}  // namespace sy::offload
