// `switchyard plan`: where a training config's states live and whether a machine group holds them,
// by the MoESys capacity rule (launcher/training/capacity_plan.h).
//
//   switchyard plan --config C [--set key=value ...] [--ranks N --gpu-gib G --cpu-gib M
//                   --ssd-gib S --alpha A] [--json]
//
// The memory flags are per rank and default to this machine's: the train.device's memory (the
// host's for cpu), the host's MemTotal, and the free space where expert_store.dir would live, each
// divided among the --ranks-per-machine ranks (default: all --ranks on this machine). --alpha
// defaults to the CPU cache's share of the expert states (expert_store.cache_mib), or 1 without a
// store. Exit status 0 when the config fits, 2 when it does not, 1 on an error.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/training/capacity_plan.h"
#include "launcher/training/train_options.h"
#include "launcher/training/training_memory.h"

namespace sy::launcher {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Bytes(double bytes) {
  char text[64];
  if (bytes >= kGiB) {
    std::snprintf(text, sizeof(text), "%.2f GiB", bytes / kGiB);
  } else {
    std::snprintf(text, sizeof(text), "%.2f MiB", bytes / (1024.0 * 1024.0));
  }
  return text;
}

std::string Millions(int64_t n) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.3f M", static_cast<double>(n) / 1e6);
  return text;
}

class PlanCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--config", config_path_, "Training config (JSON)")->required();
    app.add_option("--set", overrides_, "Override a config key: --set model.num_experts=64");
    app.add_option("--ranks", ranks_, "Ranks in the machine group, N (default 1)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--ranks-per-machine", ranks_per_machine_,
                   "Ranks sharing one machine's memory and disk (default: --ranks)")
        ->check(IntegerRange(1, 1 << 20));
    app.add_option("--gpu-gib", gpu_gib_, "Device memory per rank, GiB (default: this machine's)")
        ->check(NumberRange(1e-6, 1e9));
    app.add_option("--cpu-gib", cpu_gib_, "Host memory per rank, GiB (default: this machine's)")
        ->check(NumberRange(1e-6, 1e9));
    app.add_option("--ssd-gib", ssd_gib_,
                   "SSD/PMem space per rank, GiB (default: the free space of expert_store.dir)")
        ->check(NumberRange(1e-6, 1e12));
    app.add_option("--alpha", alpha_,
                   "Hot fraction of the experts in the CPU cache (default: from "
                   "expert_store.cache_mib, or 1 without a store)")
        ->check(NumberRange(1e-9, 1));
    AddJsonOptions(app, &json_);
  }

  int Run() override {
    Result<bool> fits = RunPlan();
    if (!fits.ok()) return ExitCode(fits.status());
    return *fits ? 0 : 2;
  }

 private:
  Result<bool> RunPlan() {
    SY_ASSIGN_OR_RETURN(TrainConfig config, LoadTrainConfigFile(config_path_, overrides_));
    const int per_machine = ranks_per_machine_ > 0 ? ranks_per_machine_ : ranks_;
    SY_ASSIGN_OR_RETURN(MachineGroup group, MachineDefaults(config, per_machine));
    group.ranks = ranks_;
    if (gpu_gib_ > 0) group.device_bytes = gpu_gib_ * kGiB;
    if (cpu_gib_ > 0) group.cpu_bytes = cpu_gib_ * kGiB;
    if (ssd_gib_ > 0) group.ssd_bytes = ssd_gib_ * kGiB;
    const double alpha = alpha_ > 0 ? alpha_ : ConfiguredAlpha(config, ranks_);
    SY_ASSIGN_OR_RETURN(CapacityPlan plan, PlanCapacity(config, group, alpha));
    SY_ASSIGN_OR_RETURN(const bool printed, EmitJson(json_, PlanJson(plan).dump()));
    if (!printed) Print(plan, config);
    return plan.fits();
  }

  void Print(const CapacityPlan& plan, const TrainConfig& config) const {
    std::printf(
        "model: %s dense parameters (D), %s expert parameters (S) in %d MoE layers (L) of "
        "%lld experts\n",
        Millions(plan.dense_parameters).c_str(), Millions(plan.expert_parameters).c_str(),
        plan.moe_layers, static_cast<long long>(plan.num_experts));
    std::printf("group: %d rank%s; hot fraction alpha = %.4g\n", ranks_, ranks_ == 1 ? "" : "s",
                plan.alpha);
    std::printf("where the states live (MoESys):\n");
    const double d = static_cast<double>(plan.dense_parameters);
    const double s = static_cast<double>(plan.expert_parameters);
    std::printf(
        "  device: dense states %d B/param (%s) + activated experts %d B/param of alpha S/L "
        "(%s)\n",
        plan.dense_bytes, Bytes(plan.dense_bytes * d).c_str(), plan.active_expert_bytes,
        Bytes(plan.active_expert_bytes * plan.alpha * s / std::max(1, plan.moe_layers)).c_str());
    std::printf("  cpu:    hot expert states 16 B/param of alpha S (%s)\n",
                Bytes(16 * plan.alpha * s).c_str());
    std::printf("  ssd:    every expert's master, m and v, 12 B/param (%s)%s\n",
                Bytes(12 * s).c_str(),
                config.expert_store.enabled() ? (" in " + config.expert_store.dir).c_str() : "");
    for (const CapacityCheck& c : plan.checks) {
      std::printf("  %-8s %-38s %10s of %10s  %s\n", (c.tier + ":").c_str(), c.inequality.c_str(),
                  Bytes(c.need_bytes).c_str(), Bytes(c.have_bytes).c_str(),
                  c.fits() ? "fits" : "DOES NOT FIT");
    }
    std::printf("%s\n", plan.fits() ? "the config fits" : "the config does not fit");
    if (plan.moe_layers > 0) {
      std::printf("largest model.num_experts that fits: %lld (then %s is full)\n",
                  static_cast<long long>(plan.max_experts), plan.limited_by.c_str());
    }
    if (!config.expert_store.enabled()) {
      std::printf(
          "note: expert_store.dir is not set, so this run keeps every expert's states in "
          "memory; set it to put them on the SSD as planned\n");
    }
    if (UsesExpertWorkingSet(config)) {
      std::printf(
          "note: the trainer holds only the experts a step activates (with replicas, those of "
          "any replica), as f32 weight and gradient (8 B/param, and host copies on a device; at "
          "most %s per rank for this config's batch), beside the cache\n",
          Bytes(ExpertWorkingSetBytes(config, plan.moe_layers, ranks_)).c_str());
    }
  }

  nlohmann::json PlanJson(const CapacityPlan& plan) const {
    nlohmann::json checks = nlohmann::json::array();
    for (const CapacityCheck& c : plan.checks) {
      checks.push_back({{"tier", c.tier},
                        {"inequality", c.inequality},
                        {"need_bytes", c.need_bytes},
                        {"have_bytes", c.have_bytes},
                        {"fits", c.fits()}});
    }
    nlohmann::json out = {{"dense_parameters", plan.dense_parameters},
                          {"expert_parameters", plan.expert_parameters},
                          {"moe_layers", plan.moe_layers},
                          {"num_experts", plan.num_experts},
                          {"ranks", ranks_},
                          {"alpha", plan.alpha},
                          {"checks", checks},
                          {"fits", plan.fits()},
                          {"max_experts", plan.max_experts},
                          {"limited_by", plan.limited_by}};
    return out;
  }

  std::string config_path_;
  std::vector<std::string> overrides_;
  int ranks_ = 1;
  int ranks_per_machine_ = 0;
  double gpu_gib_ = 0;
  double cpu_gib_ = 0;
  double ssd_gib_ = 0;
  double alpha_ = 0;
  JsonOutput json_;
};

}  // namespace

SY_REGISTER_COMMAND("plan",
                    "Where a training config's states live and whether a machine group holds them "
                    "(the MoESys capacity rule)",
                    PlanCommand);

}  // namespace sy::launcher
