// The MoESys capacity rule (../shared/papers/DIGEST.md, "MoESys"; the paper's section 3): where a
// training config's states live and whether a machine group holds them.
//
// Per parameter, MoESys keeps the dense states on the device (fp16 value and gradient, fp32
// master, m and v: 16 B), the expert (sparse) states on SSD/PMem (fp32 master, m, v: 12 B), a hot
// fraction alpha of the experts in the CPU cache (16 B each: their states and fp16 copies), and on
// the device only the experts a layer activates (4 B: fp16 value and gradient, alpha S / L of
// them). For a group of N ranks, with D dense and S expert parameters over L MoE layers:
//
//   device:  16 D + 4 alpha S / L  <=  M_device * N
//   cpu:     16 alpha S            <=  M_cpu * N
//   ssd:     12 S                  <=  M_ssd * N
//
// The device's coefficients are this build's in the configured train.precision, which keeps f32
// gradients: f32 has 16 D (value, gradient, m, v) + 8 alpha S / L (an activated expert's f32
// value and gradient); bf16 and f16 have 18 D (the 16-bit compute copy beside the f32 master,
// gradient, m, v) + 6 alpha S / L.
//
// PlanCapacity evaluates the three, says which fail, and finds the largest model.num_experts for
// which all three hold (everything else as configured).
//
// Ownership: value types. Thread-safety: pure functions, except MachineDefaults (reads /proc,
// statvfs and the device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/training/train_options.h"
#include "runtime/core/status.h"

namespace sy::launcher {

struct MachineGroup {
  int ranks = 1;            // N
  double device_bytes = 0;  // M_device, per rank
  double cpu_bytes = 0;     // M_cpu, per rank
  double ssd_bytes = 0;     // M_ssd, per rank
};

struct CapacityCheck {
  std::string tier;        // "device", "cpu", "ssd"
  std::string inequality;  // "16D + 4aS/L <= M_device*N"
  double need_bytes = 0;   // the left side
  double have_bytes = 0;   // the right side
  bool fits() const { return need_bytes <= have_bytes; }
};

struct CapacityPlan {
  int64_t dense_parameters = 0;   // D: every parameter but the routed experts'
  int64_t expert_parameters = 0;  // S
  int moe_layers = 0;             // L
  int64_t num_experts = 0;        // per MoE layer, as configured
  double alpha = 0;               // the hot fraction of the experts the CPU cache holds
  // The device's bytes per dense parameter and per activated expert parameter in the configured
  // train.precision (16 and 8 in f32, 18 and 6 in bf16 / f16).
  int dense_bytes = 0;
  int active_expert_bytes = 0;
  std::vector<CapacityCheck> checks;  // device, cpu, ssd
  // The largest num_experts that satisfies all three (0 when not even top_k experts fit), and the
  // tier that stops it from being larger.
  int64_t max_experts = 0;
  std::string limited_by;
  bool fits() const;
};

// InvalidArgument for alpha outside (0, 1] or a group without ranks or memory.
Result<CapacityPlan> PlanCapacity(const TrainConfig& config, const MachineGroup& group,
                                  double alpha);

// The hot fraction the config implies: with an expert store, the CPU cache's share of the expert
// states (expert_store.cache_mib per rank, over 16 B per parameter, at most 1); without one, 1
// (every expert's state is in memory).
double ConfiguredAlpha(const TrainConfig& config, int ranks);

// This machine, per rank of `ranks_per_machine`: the train.device's memory (a cuda device's
// capacity, the sim device's budget, the host's memory for cpu), the host's memory (MemTotal), and
// the free space where the expert store would live (expert_store.dir, or the working directory).
Result<MachineGroup> MachineDefaults(const TrainConfig& config, int ranks_per_machine);

}  // namespace sy::launcher
