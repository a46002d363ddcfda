#include "launcher/training/capacity_plan.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>

#include "runtime/backend/backend.h"
#include "runtime/core/host_memory.h"

namespace sy::launcher {
namespace {

struct Counts {
  int64_t dense = 0;
  int64_t experts = 0;
};

Counts CountParameters(const ModelConfig& model) {
  const int64_t experts = model.NumExpertParameters();
  return Counts{model.NumParameters() - experts, experts};
}

// Bytes per parameter on the device in this build (docs/training.md, "Precision"): a dense
// parameter's value, f32 gradient, m and v, plus the f32 master beside a 16-bit value; an activated
// expert's value and f32 gradient. (MoESys's fp16 layout, with fp16 gradients, has 16 and 4.)
int DenseBytes(Precision precision) { return precision != Precision::kF32 ? 18 : 16; }
int ActiveExpertBytes(Precision precision) { return precision != Precision::kF32 ? 6 : 8; }

std::vector<CapacityCheck> Check(const Counts& n, int moe_layers, double alpha,
                                 const MachineGroup& g, Precision precision) {
  const double d = static_cast<double>(n.dense), s = static_cast<double>(n.experts);
  const double l = std::max(1, moe_layers);
  const int dense = DenseBytes(precision), active = ActiveExpertBytes(precision);
  return {
      {"device",
       std::to_string(dense) + " D + " + std::to_string(active) + " alpha S / L <= M_device x N",
       dense * d + active * alpha * s / l, g.device_bytes * g.ranks},
      {"cpu", "16 alpha S <= M_cpu x N", 16 * alpha * s, g.cpu_bytes * g.ranks},
      {"ssd", "12 S <= M_ssd x N", 12 * s, g.ssd_bytes * g.ranks},
  };
}

}  // namespace

bool CapacityPlan::fits() const {
  return std::all_of(checks.begin(), checks.end(), [](const CapacityCheck& c) { return c.fits(); });
}

double ConfiguredAlpha(const TrainConfig& config, int ranks) {
  if (!config.expert_store.enabled()) return 1.0;
  const double s = static_cast<double>(config.model.NumExpertParameters());
  if (s <= 0) return 1.0;
  return std::min(1.0, config.expert_store.cache_mib * 1048576.0 * ranks / (16 * s));
}

Result<CapacityPlan> PlanCapacity(const TrainConfig& config, const MachineGroup& group,
                                  double alpha) {
  if (!(alpha > 0 && alpha <= 1)) {
    return InvalidArgumentError("plan: alpha (the hot fraction of the experts) is " +
                                std::to_string(alpha) + "; it must be in (0, 1]");
  }
  if (group.ranks < 1 || group.device_bytes <= 0 || group.cpu_bytes <= 0 || group.ssd_bytes <= 0) {
    return InvalidArgumentError(
        "plan: the machine group needs at least one rank and some device, cpu and ssd memory "
        "(pass --ranks, --gpu-gib, --cpu-gib, --ssd-gib)");
  }
  CapacityPlan plan;
  const Counts counts = CountParameters(config.model);
  plan.dense_parameters = counts.dense;
  plan.expert_parameters = counts.experts;
  plan.moe_layers = config.model.NumMoeLayers();
  plan.num_experts = config.model.num_experts;
  plan.alpha = alpha;
  const Precision precision = config.train.precision;
  plan.dense_bytes = DenseBytes(precision);
  plan.active_expert_bytes = ActiveExpertBytes(precision);
  plan.checks = Check(counts, plan.moe_layers, alpha, group, precision);

  // The rule is monotonic in the expert count: search for the largest that fits.
  auto fits_with = [&](int64_t experts, std::string* failing) {
    ModelConfig model = config.model;
    model.num_experts = experts;
    for (const CapacityCheck& c :
         Check(CountParameters(model), plan.moe_layers, alpha, group, precision)) {
      if (!c.fits()) {
        if (failing != nullptr) *failing = c.tier;
        return false;
      }
    }
    return true;
  };
  const int64_t lowest = std::max<int64_t>(1, config.model.top_k);
  if (plan.moe_layers == 0 || !fits_with(lowest, &plan.limited_by)) {
    plan.max_experts = plan.moe_layers == 0 ? config.model.num_experts : 0;
    return plan;
  }
  int64_t good = lowest, bad = lowest * 2;
  while (fits_with(bad, nullptr) && bad < (int64_t{1} << 40)) {
    good = bad;
    bad *= 2;
  }
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (fits_with(mid, nullptr) ? good : bad) = mid;
  }
  plan.max_experts = good;
  fits_with(bad, &plan.limited_by);
  return plan;
}

Result<MachineGroup> MachineDefaults(const TrainConfig& config, int ranks_per_machine) {
  MachineGroup group;
  group.ranks = std::max(1, ranks_per_machine);
  const double host = TotalHostMemory();
  group.cpu_bytes = host / group.ranks;
  SY_ASSIGN_OR_RETURN(Device device, ParseDevice(config.train.device));
  group.device_bytes = group.cpu_bytes;  // cpu: the device is the host's memory
  if (device.type != DeviceType::kCpu) {
    Result<std::unique_ptr<Backend>> backend = CreateBackend(device);
    if (backend.ok() && (*backend)->memory_stats().limit > 0) {
      group.device_bytes = static_cast<double>((*backend)->memory_stats().limit);
    }
  }
  std::string where = config.expert_store.enabled() ? config.expert_store.dir : ".";
  std::error_code ec;
  // The store directory may not exist yet: the free space of the nearest existing parent.
  std::filesystem::path path = std::filesystem::absolute(where, ec);
  while (!path.empty() && !std::filesystem::exists(path, ec) && path != path.parent_path()) {
    path = path.parent_path();
  }
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) == 0) {
    group.ssd_bytes =
        static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize) / group.ranks;
  }
  return group;
}

}  // namespace sy::launcher
