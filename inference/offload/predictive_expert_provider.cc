#include "inference/offload/predictive_expert_provider.h"

#include <algorithm>
#include <utility>

#include "inference/offload/swiglu_expert.h"
#include "runtime/core/check.h"
#include "runtime/model/host_transfer.h"

namespace sy::offload {
namespace {

ExpertKey Key(int moe_index, int32_t expert) {
  return ExpertKey{static_cast<uint32_t>(moe_index), static_cast<uint32_t>(expert)};
}

}  // namespace

Status PredictiveExpertProvider::Attach(MoeModel& model,
                                        std::vector<std::unique_ptr<ExpertCompute>> computes) {
  // The model's own expert computations are not used: every expert comes from the slots.
  computes.clear();
  if (options_.predictor != nullptr) {
    predictor_ = options_.predictor;
  } else {
    SY_ASSIGN_OR_RETURN(std::unique_ptr<SkipGatePredictor> skip,
                        SkipGatePredictor::Create(model, options_.stride));
    predictor_ = std::move(skip);
  }
  SY_RETURN_IF_ERROR(CheckPredictorFits(*predictor_, model.config()));
  SY_ASSIGN_OR_RETURN(host_, HostTier(model));
  DeviceExpertCacheOptions cache_options;
  cache_options.num_slots = options_.num_slots;
  cache_options.policy = options_.cache_policy;
  SY_ASSIGN_OR_RETURN(cache_,
                      DeviceExpertCache::Create(model.backend(), host_->layout(), cache_options));
  engine_ = std::make_unique<TransferEngine>(model.backend(), *host_, *cache_);
  const size_t layers = static_cast<size_t>(model.config().NumMoeLayers());
  held_.resize(layers);
  predicted_.resize(layers);
  has_prediction_.assign(layers, false);
  return Status::Ok();
}

Status PredictiveExpertProvider::OnBeginStep(Backend& backend, const ExpertStep& step) {
  (void)backend;
  (void)step;
  std::fill(has_prediction_.begin(), has_prediction_.end(), false);
  return Status::Ok();
}

Status PredictiveExpertProvider::OnEndStep(Backend& backend) {
  (void)backend;
  UpdateStats();
  return Status::Ok();
}

void PredictiveExpertProvider::DrainTransfers() {
  SY_CHECK(engine_ != nullptr) << "PredictiveExpertProvider::DrainTransfers before Install";
  engine_->Drain();
  UpdateStats();
}

void PredictiveExpertProvider::UpdateStats() {
  const TransferStats transfers = engine_->stats();
  mutable_stats().bytes_host_to_device = static_cast<int64_t>(transfers.bytes_host_to_device);
  mutable_stats().stall_seconds = static_cast<double>(transfers.stall_ns) * 1e-9;
}

Result<bool> PredictiveExpertProvider::EnqueueHigh(int moe_index, int32_t expert,
                                                   std::vector<Held>& held) {
  Result<SlotHandle> handle = engine_->Enqueue(TransferPriority::kHigh, Key(moe_index, expert));
  if (!handle.ok()) {
    if (handle.status().code() == StatusCode::kResourceExhausted) return false;
    return handle.status();
  }
  held.push_back(Held{expert, std::move(handle).value()});
  return true;
}

void PredictiveExpertProvider::CountGateRequest(int moe_index, int32_t expert) {
  const int slot = cache_->Lookup(Key(moe_index, expert));
  ++gate_requests_;
  gate_hits_ += slot >= 0 && cache_->Ready(slot) ? 1 : 0;
}

std::map<std::string, double> PredictiveExpertProvider::extra_metrics() const {
  std::map<std::string, double> metrics;
  if (engine_ == nullptr) return metrics;
  if (options_.prefetch) metrics["predictor_accuracy"] = accuracy_.fraction();
  if (gate_requests_ > 0) {
    metrics["device_cache_hit_rate"] =
        static_cast<double>(gate_hits_) / static_cast<double>(gate_requests_);
  }
  const TransferStats t = engine_->stats();
  metrics["predictions_cancelled"] = static_cast<double>(t.tasks_cancelled);
  metrics["promoted"] = static_cast<double>(t.promoted);
  return metrics;
}

int PredictiveExpertProvider::ReadyChunks(const Held& held) const {
  int ready = 0;
  for (ExpertChunk c : kExpertChunks) ready += cache_->ChunkReady(held.handle.slot(), c) ? 1 : 0;
  return ready;
}

void PredictiveExpertProvider::SortByReadiness(int moe_index, std::vector<int32_t>& experts) const {
  std::vector<std::pair<int, int32_t>> scored;
  for (const int32_t e : experts) {
    const int slot = cache_->Lookup(Key(moe_index, e));
    int ready = -1;  // not on the device nor on its way
    if (slot >= 0) {
      ready = 0;
      for (ExpertChunk c : kExpertChunks) ready += cache_->ChunkReady(slot, c) ? 1 : 0;
    }
    scored.emplace_back(ready, e);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < scored.size(); ++i) experts[i] = scored[i].second;
}

Status PredictiveExpertProvider::Routed(Backend& backend, const MoeRouting& routing) {
  SY_CHECK(engine_ != nullptr) << "PredictiveExpertProvider::Routed before Install";
  const int m = routing.moe_index;
  const ExpertRouting& r = *routing.routing;
  std::vector<int32_t> gate_set;
  for (size_t e = 0; e < r.plan->group_rows.size(); ++e) {
    if (r.plan->group_rows[e] > 0) gate_set.push_back(static_cast<int32_t>(e));
  }
  if (has_prediction_[static_cast<size_t>(m)]) {
    accuracy_.Add(gate_set, predicted_[static_cast<size_t>(m)]);
  }
  for (const int32_t e : gate_set) CountGateRequest(m, e);

  if (options_.early_preemption) {
    // The gate's whole choice is known now: queue all of it at HIGH (promoting correct
    // predictions still queued), then drop what is left of this layer's predictions.
    if (options_.reorder) SortByReadiness(m, gate_set);
    std::vector<Held>& held = held_[static_cast<size_t>(m)];
    for (const int32_t e : gate_set) {
      SY_ASSIGN_OR_RETURN(const bool queued, EnqueueHigh(m, e, held));
      if (!queued) break;  // the rest are queued in RunExperts as slots free up
    }
    engine_->CancelLow(m);
  }

  const int target = m + predictor_->stride();
  const int64_t n = r.h.defined() ? r.h.dim(0) : 0;
  if (!options_.prefetch || target >= predictor_->num_layers() || n == 0) return Status::Ok();
  SY_ASSIGN_OR_RETURN(std::vector<float> h, DownloadF32(backend, r.h));
  const int experts = predictor_->num_experts();
  std::vector<float> scores(static_cast<size_t>(n * experts));
  predictor_->Scores(m, h, n, scores);
  const std::vector<int32_t> set =
      PredictedSet(TopKExperts(scores, n, experts, predictor_->top_k()), experts);
  predicted_[static_cast<size_t>(target)] = set;
  has_prediction_[static_cast<size_t>(target)] = true;
  for (const int32_t e : set) {
    Result<SlotHandle> pin = engine_->Enqueue(TransferPriority::kLow, Key(target, e));
    if (pin.ok()) continue;  // the engine holds its own pin while it copies
    if (pin.status().code() == StatusCode::kResourceExhausted) break;  // no slot left to guess
    return pin.status();
  }
  return Status::Ok();
}

Status PredictiveExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                            std::span<const int64_t> group_rows, const Tensor& ys) {
  SY_CHECK(engine_ != nullptr) << "PredictiveExpertProvider::RunExperts before Install";
  SY_CHECK_EQ(static_cast<int>(group_rows.size()), cache_->layout().num_experts) << "groups";
  struct Item {
    int32_t expert;
    int64_t row, rows;
  };
  std::vector<Item> items;  // in expert order
  int64_t row = 0;
  for (size_t e = 0; e < group_rows.size(); ++e) {
    if (group_rows[e] > 0) items.push_back(Item{static_cast<int32_t>(e), row, group_rows[e]});
    row += group_rows[e];
  }
  std::vector<Held> held = std::move(held_[static_cast<size_t>(moe_index)]);
  held_[static_cast<size_t>(moe_index)].clear();
  auto is_held = [&held](int32_t e) {
    return std::any_of(held.begin(), held.end(), [e](const Held& h) { return h.expert == e; });
  };
  // Without early preemption or reordering, each expert is asked for only when its turn comes
  // (a passive miss); otherwise every expert not yet queued is queued at once.
  const bool eager = options_.early_preemption || options_.reorder;

  while (!items.empty()) {
    std::vector<int32_t> missing;
    for (const Item& item : items) {
      if (!is_held(item.expert)) missing.push_back(item.expert);
      if (!eager) break;
    }
    if (options_.reorder) SortByReadiness(moe_index, missing);
    for (size_t i = 0; i < missing.size(); ++i) {
      SY_ASSIGN_OR_RETURN(const bool queued, EnqueueHigh(moe_index, missing[i], held));
      if (queued) continue;
      if (!held.empty()) break;
      // Every slot is pinned by predictions in flight: drop them and try again.
      engine_->CancelLow();
      engine_->Drain();
      SY_ASSIGN_OR_RETURN(const bool retried, EnqueueHigh(moe_index, missing[i], held));
      if (!retried) {
        return ResourceExhaustedError("predictive: no device expert slot is free for " +
                                      Key(moe_index, missing[i]).ToString() + " (" +
                                      std::to_string(cache_->num_slots()) +
                                      " slots); give the policy more slots");
      }
      break;
    }
    SY_CHECK(!held.empty()) << "predictive: nothing queued for MoE layer " << moe_index;

    // The expert to run next: the most ready one (reordering), else the lowest id held.
    size_t pick = 0;
    if (options_.reorder) {
      int best = -1;
      for (size_t i = 0; i < held.size(); ++i) {
        const int ready = ReadyChunks(held[i]);
        if (ready > best) {
          best = ready;
          pick = i;
        }
      }
    } else {
      for (size_t i = 1; i < held.size(); ++i) {
        if (held[i].expert < held[pick].expert) pick = i;
      }
    }
    Held next = std::move(held[pick]);
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(pick));
    auto item = std::find_if(items.begin(), items.end(),
                             [&next](const Item& it) { return it.expert == next.expert; });
    SY_CHECK(item != items.end()) << "predictive: expert " << next.expert << " has no rows";
    SY_RETURN_IF_ERROR(engine_->Wait(next.handle));
    const int slot = next.handle.slot();
    SY_RETURN_IF_ERROR(RunSwigluExpert(
        backend, cache_->chunk(slot, ExpertChunk::kGate), cache_->chunk(slot, ExpertChunk::kUp),
        cache_->chunk(slot, ExpertChunk::kDown), xs.Slice(item->row, item->row + item->rows),
        ys.Slice(item->row, item->row + item->rows)));
    next.handle.Release();
    items.erase(item);
  }
  UpdateStats();
  return Status::Ok();
}

}  // namespace sy::offload
