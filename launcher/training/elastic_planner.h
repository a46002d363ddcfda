// The elastic planner (train.placement elastic; MoESys's elastic training, docs/training.md): a
// cost model of one rank's step time, calibrated from the ranks' measured step times, and the
// placement of the tasks on ranks that balances its predictions.
//
// Cost model. A rank that computes R tokens (rows x seq_len) in a step takes
//   seconds = fixed + per_token_layer * R * num_layers + per_a2a_byte * A(R)
// where A(R) is the bytes its expert all-to-alls send off the rank: R tokens, top_k copies of a
// hidden_size f32 vector, dispatched and combined in the forward and the backward, in every MoE
// layer, (ep - 1) / ep of them to other ranks. The step of the job takes the slowest rank's time
// (every collective waits for it: the "cask effect").
//
// Calibration (CalibrateCostModel): each rank's mean compute seconds over a window (its step time
// less its time in collectives) against its tokens x layers, fitted by least squares over the
// ranks (fixed and per_token_layer, both kept >= 0); per_a2a_byte from the rank that waited least
// (the slowest one, whose collective time is closest to pure transfer); and each rank's speed,
// its measured compute time over the fitted one (clamped to [0.5, 2]). Before any measurement
// the model is the prior: per_token_layer 1, nothing else, which balances tokens x layers.
//
// Planning (PlanElastic): every task with rows starts as one piece; the pieces are packed onto
// the ranks longest first, each onto the rank whose predicted time is lowest (LPT). Then, while
// the prediction improves, the task with the largest piece on the slowest rank is cut into one
// more piece (data parallel inside the task). There are at least as many pieces as ranks, so that
// every rank computes; light tasks end up merged onto shared ranks. Deterministic for the same
// inputs.
//
// Value types and pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/training/task_placement.h"
#include "runtime/model/model_config.h"

namespace sy::launcher {

struct CostModel {
  double fixed = 0;              // seconds per rank-step, whatever its rows
  double per_token_layer = 1.0;  // seconds per token per decoder layer
  double per_a2a_byte = 0;       // seconds per byte sent off the rank by the all-to-alls
  bool calibrated = false;       // false: the prior
  // Per rank, its compute time against the fit (1 = as fitted, 2 = twice as slow); empty = all 1.
  // A rank slowed by something else on its machine gets less work.
  std::vector<double> rank_speed;

  std::string ToString() const;
};

// What the cost model needs of the model and the job.
struct CostShape {
  int64_t seq_len = 1;
  int num_layers = 1;
  int num_moe_layers = 0;
  int top_k = 1;
  int64_t hidden_size = 1;
  int ep_size = 1;

  static CostShape Of(const ModelConfig& model, int64_t seq_len, int ep_size);
  // Bytes a rank computing `tokens` tokens sends off the rank in one step's all-to-alls.
  double A2aBytes(int64_t tokens) const;
};

// One rank's measurements over a window of steps (means per step).
struct RankSample {
  double compute_seconds = 0;  // step time less time in collectives
  double wait_seconds = 0;     // time in collectives (transfer plus waiting for peers)
  int64_t tokens = 0;          // tokens it computed per step
};

CostModel CalibrateCostModel(const std::vector<RankSample>& samples, const CostShape& shape);

double PredictRankSeconds(const CostModel& cost, const CostShape& shape, int64_t tokens);
// The predicted step time of `placement`: its slowest rank's.
double PredictStepSeconds(const CostModel& cost, const CostShape& shape,
                          const TaskPlacement& placement, const std::vector<int64_t>& rows);

// The balanced placement of the tasks' `rows` on `world` ranks. InvalidArgument when the rows in
// all are fewer than the ranks (some rank would have none).
Result<TaskPlacement> PlanElastic(const CostModel& cost, const CostShape& shape,
                                  const std::vector<int64_t>& rows, int world);

}  // namespace sy::launcher
