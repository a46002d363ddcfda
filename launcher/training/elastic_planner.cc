#include "launcher/training/elastic_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "runtime/core/check.h"

namespace sy::launcher {
namespace {

// A piece of a task's batch, for packing.
struct Piece {
  int task = 0;
  size_t index = 0;  // j of k
  int64_t tokens = 0;
};

double RankSpeed(const CostModel& cost, int rank) {
  return rank < static_cast<int>(cost.rank_speed.size()) ? cost.rank_speed[rank] : 1.0;
}

// Seconds a rank of speed `speed` takes for `tokens`.
double RankSeconds(const CostModel& cost, const CostShape& shape, double speed, int64_t tokens) {
  return cost.fixed +
         speed * cost.per_token_layer * static_cast<double>(tokens) * shape.num_layers +
         cost.per_a2a_byte * shape.A2aBytes(tokens);
}

// Packs every task cut into pieces[t] pieces onto `world` ranks, longest piece first, each onto
// the rank that would then finish first; returns the placement and its predicted step time.
TaskPlacement Pack(const CostModel& cost, const CostShape& shape, const std::vector<int64_t>& rows,
                   const std::vector<size_t>& pieces, int world, double* predicted) {
  std::vector<Piece> all;
  for (size_t t = 0; t < rows.size(); ++t) {
    for (size_t j = 0; j < pieces[t]; ++j) {
      const auto [begin, end] = PieceRows(rows[t], j, pieces[t]);
      all.push_back({static_cast<int>(t), j, (end - begin) * shape.seq_len});
    }
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const Piece& a, const Piece& b) { return a.tokens > b.tokens; });
  std::vector<int64_t> tokens(static_cast<size_t>(world), 0);
  std::vector<int> pieces_on(static_cast<size_t>(world), 0);
  TaskPlacement p;
  p.world = world;
  p.ranks_of_task.resize(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) p.ranks_of_task[t].assign(pieces[t], -1);
  for (const Piece& piece : all) {
    // A rank without a piece first (every rank must compute), then the earliest finish.
    int best = -1;
    double best_seconds = 0;
    for (int r = 0; r < world; ++r) {
      const double s = RankSeconds(cost, shape, RankSpeed(cost, r),
                                   tokens[static_cast<size_t>(r)] + piece.tokens);
      const bool empty = pieces_on[static_cast<size_t>(r)] == 0;
      const bool best_empty = best >= 0 && pieces_on[static_cast<size_t>(best)] == 0;
      if (best < 0 || (empty && !best_empty) || (empty == best_empty && s < best_seconds)) {
        best = r;
        best_seconds = s;
      }
    }
    tokens[static_cast<size_t>(best)] += piece.tokens;
    ++pieces_on[static_cast<size_t>(best)];
    p.ranks_of_task[static_cast<size_t>(piece.task)][piece.index] = best;
  }
  double worst = 0;
  for (int r = 0; r < world; ++r) {
    worst = std::max(worst,
                     RankSeconds(cost, shape, RankSpeed(cost, r), tokens[static_cast<size_t>(r)]));
  }
  *predicted = worst;
  return p;
}

}  // namespace

std::string CostModel::ToString() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s: %.3g s + %.3g s/(token x layer) + %.3g s/byte",
                calibrated ? "calibrated" : "prior", fixed, per_token_layer, per_a2a_byte);
  std::string out = buf;
  if (!rank_speed.empty()) {
    out += ", rank speed";
    for (double s : rank_speed) {
      std::snprintf(buf, sizeof(buf), " %.2f", s);
      out += buf;
    }
  }
  return out;
}

CostShape CostShape::Of(const ModelConfig& model, int64_t seq_len, int ep_size) {
  CostShape s;
  s.seq_len = seq_len;
  s.num_layers = model.num_layers;
  s.num_moe_layers = model.NumMoeLayers();
  s.top_k = model.top_k;
  s.hidden_size = model.hidden_size;
  s.ep_size = ep_size;
  return s;
}

double CostShape::A2aBytes(int64_t tokens) const {
  if (ep_size <= 1 || num_moe_layers == 0) return 0;
  // Dispatch and combine, forward and backward: four exchanges of top_k f32 vectors per token.
  const double per_token = 4.0 * top_k * static_cast<double>(hidden_size) * sizeof(float);
  return per_token * static_cast<double>(tokens) * num_moe_layers *
         static_cast<double>(ep_size - 1) / ep_size;
}

CostModel CalibrateCostModel(const std::vector<RankSample>& samples, const CostShape& shape) {
  CostModel cost;
  const size_t n = samples.size();
  if (n == 0) return cost;
  std::vector<double> x(n), y(n);
  for (size_t r = 0; r < n; ++r) {
    x[r] = static_cast<double>(samples[r].tokens) * shape.num_layers;
    y[r] = samples[r].compute_seconds;
  }
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(n);
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (size_t r = 0; r < n; ++r) {
    sxx += (x[r] - mx) * (x[r] - mx);
    sxy += (x[r] - mx) * (y[r] - my);
  }
  if (mx <= 0 || my <= 0) return cost;  // nothing measured: keep the prior
  double slope = sxx > 1e-6 * mx * mx ? sxy / sxx : 0;
  double fixed = my - slope * mx;
  // A fit through noise may come out with a negative term; then all time is per token.
  if (slope <= 0 || fixed < 0) {
    slope = my / mx;
    fixed = 0;
  }
  cost.fixed = fixed;
  cost.per_token_layer = slope;
  // Each rank against the fit: > 1 is a rank slower than the others at the same work.
  cost.rank_speed.resize(n, 1.0);
  for (size_t r = 0; r < n; ++r) {
    if (x[r] <= 0) continue;
    const double speed = (y[r] - fixed) / (slope * x[r]);
    cost.rank_speed[r] = std::clamp(speed, 0.5, 2.0);
  }
  // The rank that waited least spent its collective time transferring.
  double per_byte = -1;
  for (const RankSample& s : samples) {
    const double bytes = shape.A2aBytes(s.tokens);
    if (bytes <= 0) continue;
    const double v = s.wait_seconds / bytes;
    if (per_byte < 0 || v < per_byte) per_byte = v;
  }
  cost.per_a2a_byte = std::max(0.0, per_byte);
  cost.calibrated = true;
  return cost;
}

double PredictRankSeconds(const CostModel& cost, const CostShape& shape, int64_t tokens) {
  return RankSeconds(cost, shape, 1.0, tokens);
}

double PredictStepSeconds(const CostModel& cost, const CostShape& shape,
                          const TaskPlacement& placement, const std::vector<int64_t>& rows) {
  const std::vector<int64_t> per_rank = placement.RowsPerRank(rows);
  double worst = 0;
  for (int r = 0; r < placement.world; ++r) {
    worst = std::max(worst, RankSeconds(cost, shape, RankSpeed(cost, r),
                                        per_rank[static_cast<size_t>(r)] * shape.seq_len));
  }
  return worst;
}

Result<TaskPlacement> PlanElastic(const CostModel& cost, const CostShape& shape,
                                  const std::vector<int64_t>& rows, int world) {
  const int64_t total = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  if (total < world) {
    return InvalidArgumentError("config: the tasks have " + std::to_string(total) +
                                " rows per step in all, fewer than "
                                "the " +
                                std::to_string(world) +
                                " ranks (each needs a row); raise "
                                "data.tasks.<task>.batch_size or run on fewer ranks");
  }
  std::vector<size_t> pieces(rows.size(), 0);
  for (size_t t = 0; t < rows.size(); ++t) pieces[t] = rows[t] > 0 ? 1 : 0;
  // One more piece for the task whose pieces are largest, until every rank can have one.
  auto count = [&] { return std::accumulate(pieces.begin(), pieces.end(), size_t{0}); };
  while (count() < static_cast<size_t>(world)) {
    size_t best = rows.size();
    double best_size = -1;
    for (size_t t = 0; t < rows.size(); ++t) {
      if (pieces[t] == 0 || static_cast<int64_t>(pieces[t]) >= rows[t]) continue;
      const double size = static_cast<double>(rows[t]) / static_cast<double>(pieces[t]);
      if (size > best_size) {
        best = t;
        best_size = size;
      }
    }
    SY_CHECK_LT(best, rows.size()) << "rows " << total << " >= world " << world;
    ++pieces[best];  // total >= world, so some task can still be cut
  }
  double predicted = 0;
  TaskPlacement placement = Pack(cost, shape, rows, pieces, world, &predicted);
  // Cut one task once more while that lowers the predicted step time the most.
  for (int iter = 0; iter < 8 * world; ++iter) {
    size_t best = rows.size();
    double best_time = predicted;
    TaskPlacement best_placement;
    for (size_t t = 0; t < rows.size(); ++t) {
      if (pieces[t] == 0 || static_cast<int64_t>(pieces[t]) >= std::min<int64_t>(rows[t], world)) {
        continue;
      }
      ++pieces[t];
      double time = 0;
      TaskPlacement candidate = Pack(cost, shape, rows, pieces, world, &time);
      --pieces[t];
      if (time < best_time * (1 - 1e-9)) {
        best = t;
        best_time = time;
        best_placement = std::move(candidate);
      }
    }
    if (best == rows.size()) break;
    ++pieces[best];
    predicted = best_time;
    placement = std::move(best_placement);
  }
  return placement;
}

}  // namespace sy::launcher
