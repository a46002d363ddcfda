#include "launcher/training/expert_working_set.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/core/check.h"

namespace sy::launcher {

// Note [working set on a device]. The store reads and writes host memory (its masters, the
// gradients its Update reads), and the compute runs on the backend. On a device (sim, cuda) the
// working set keeps both: host copies bound to the store, device tensors bound to the compute. The
// weights go up once per Bind, after the store's Prepare has filled them (so the device computes
// with the exact master, as the resident path's copy after each update gives it); the gradients
// come down once per step, after the backward. The arithmetic on the device is the resident
// path's: the same grouped GEMMs over the experts with rows (an expert without rows adds nothing
// in either), so the gradients, and the host update on them, are bit-identical (on cuda because
// its scatter-adds are deterministic: runtime/cuda/index.cuh).
ExpertWorkingSet::ExpertWorkingSet(ExpertStateStore* store, Backend& backend, int64_t hidden,
                                   int64_t intermediate, DType compute_dtype)
    : store_(store),
      backend_(backend),
      on_device_(!backend.device().is_host()),
      hidden_(hidden),
      intermediate_(intermediate),
      compute_dtype_(compute_dtype) {
  SY_CHECK(store != nullptr) << "ExpertWorkingSet needs the store";
}

ExpertWorkingSet::~ExpertWorkingSet() { Clear(); }

// f32 weights and gradients of `experts` bound experts, their 16-bit weights in mixed precision,
// and the device's weights and gradients on a device.
size_t ExpertWorkingSet::LayerBytes(int64_t experts) const {
  const size_t n = static_cast<size_t>(experts * 3 * hidden_ * intermediate_);
  const size_t narrow = compute_dtype_ == DType::kF32 ? 0 : DTypeSize(compute_dtype_);
  const size_t device = on_device_ ? (narrow > 0 ? narrow : sizeof(float)) + sizeof(float) : 0;
  return n * (2 * sizeof(float) + narrow + device);
}

void ExpertWorkingSet::Drop(int layer) {
  auto it = layers_.find(layer);
  if (it == layers_.end()) return;
  // The store's entries of this layer no longer point into these tensors.
  const std::vector<float*> none(3, nullptr);
  for (const auto& [expert, slot] : it->second.slot) {
    (void)slot;
    store_->Bind(store_->Entry(layer, expert), none, {});
  }
  bytes_ -= LayerBytes(it->second.host.w_gate.dim(0));
  layers_.erase(it);
}

Result<BoundExperts> ExpertWorkingSet::Bind(int layer, int first_expert,
                                            std::span<const int64_t> group_rows) {
  Drop(layer);
  Layer bound;
  for (size_t i = 0; i < group_rows.size(); ++i) {
    if (group_rows[i] == 0) continue;
    const int64_t slot = static_cast<int64_t>(bound.slot.size());
    bound.slot.emplace(first_expert + static_cast<int>(i), slot);
    bound.host.group_rows.push_back(group_rows[i]);
  }
  const int64_t a = static_cast<int64_t>(bound.slot.size());
  const Shape up{a, intermediate_, hidden_}, down{a, hidden_, intermediate_};
  BoundExperts& t = bound.host;
  const std::string what = "expert working set of decoder layer " + std::to_string(layer) + " (" +
                           std::to_string(a) + " experts)";
  for (auto [tensor, shape] :
       {std::pair{&t.w_gate, up}, std::pair{&t.w_up, up}, std::pair{&t.w_down, down},
        std::pair{&t.dw_gate, up}, std::pair{&t.dw_up, up}, std::pair{&t.dw_down, down}}) {
    Result<Tensor> made = Tensor::TryHost(DType::kF32, shape);  // zeroed
    if (!made.ok()) return made.status().WithContext(what);
    *tensor = std::move(*made);
  }
  for (const auto& [expert, slot] : bound.slot) {
    float* const values[] = {t.w_gate.Select(slot).data<float>(), t.w_up.Select(slot).data<float>(),
                             t.w_down.Select(slot).data<float>()};
    const float* const grads[] = {t.dw_gate.Select(slot).data<float>(),
                                  t.dw_up.Select(slot).data<float>(),
                                  t.dw_down.Select(slot).data<float>()};
    store_->Bind(store_->Entry(layer, expert), values, grads);
  }
  bytes_ += LayerBytes(a);
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  Layer& kept = layers_.emplace(layer, std::move(bound)).first->second;
  // Fills the weights (and activates the experts for this step's update).
  SY_RETURN_IF_ERROR(store_->Prepare(layer, first_expert, group_rows));
  // The weights the compute reads, on the host: the filled f32 ones, or their 16-bit rounding.
  BoundExperts& computed = compute_dtype_ == DType::kF32 ? kept.host : kept.narrow;
  if (compute_dtype_ != DType::kF32) {
    computed = kept.host;  // the gradients, and the row counts
    for (auto [wide, narrow] : {std::pair{&kept.host.w_gate, &computed.w_gate},
                                std::pair{&kept.host.w_up, &computed.w_up},
                                std::pair{&kept.host.w_down, &computed.w_down}}) {
      Result<Tensor> made = Tensor::TryHost(compute_dtype_, wide->shape());
      if (!made.ok()) return made.status().WithContext(what);
      *narrow = std::move(*made);
      SY_RETURN_IF_ERROR(ConvertBuffer(wide->data(), DType::kF32, narrow->data(), compute_dtype_,
                                       static_cast<size_t>(wide->numel())));
    }
  }
  if (!on_device_ || a == 0) {  // nothing to upload without experts
    kept.device = computed;
    return kept.device;
  }
  // Note [working set on a device]: the filled weights go up, the gradients start at zero there.
  BoundExperts& d = kept.device;
  d.group_rows = kept.host.group_rows;
  const std::pair<const Tensor*, Tensor*> weights[] = {
      {&computed.w_gate, &d.w_gate}, {&computed.w_up, &d.w_up}, {&computed.w_down, &d.w_down}};
  for (auto [host, device] : weights) {
    Result<Tensor> made = backend_.AllocatePersistent(host->dtype(), host->shape());
    if (!made.ok()) return made.status().WithContext(what + " on " + backend_.name());
    *device = std::move(*made);
    backend_.CopyAsync(*host, *device, backend_.compute_stream());
  }
  for (auto [grad, shape] :
       {std::pair{&d.dw_gate, up}, std::pair{&d.dw_up, up}, std::pair{&d.dw_down, down}}) {
    Result<Tensor> made = backend_.AllocatePersistent(DType::kF32, shape);
    if (!made.ok()) return made.status().WithContext(what + " on " + backend_.name());
    *grad = std::move(*made);
    backend_.Fill(*grad, 0.0f);
  }
  backend_.SynchronizeStream(backend_.compute_stream());
  return d;
}

void ExpertWorkingSet::DownloadGradients() {
  if (!on_device_) return;
  for (auto& [layer, bound] : layers_) {
    (void)layer;
    backend_.CopyAsync(bound.device.dw_gate, bound.host.dw_gate, backend_.compute_stream());
    backend_.CopyAsync(bound.device.dw_up, bound.host.dw_up, backend_.compute_stream());
    backend_.CopyAsync(bound.device.dw_down, bound.host.dw_down, backend_.compute_stream());
  }
  backend_.SynchronizeStream(backend_.compute_stream());
}

Status ExpertWorkingSet::BindGradient(int layer, int expert) {
  auto it = layers_.find(layer);
  SY_CHECK((it == layers_.end() || !it->second.slot.contains(expert)) &&
           !gradient_only_.contains({layer, expert}))
      << "expert " << expert << " of decoder layer " << layer << " is bound already";
  const int64_t part = hidden_ * intermediate_;
  Result<Tensor> made = Tensor::TryHost(DType::kF32, Shape{3 * part});  // zeroed
  if (!made.ok()) {
    return made.status().WithContext("expert working set: the gradient of expert " +
                                     std::to_string(expert) + " of decoder layer " +
                                     std::to_string(layer) + " (another replica's)");
  }
  float* g = made->data<float>();
  float* const values[] = {nullptr, nullptr, nullptr};
  const float* const grads[] = {g, g + part, g + 2 * part};
  store_->Bind(store_->Entry(layer, expert), values, grads);
  gradient_only_.emplace(std::pair{layer, expert}, std::move(*made));
  bytes_ += static_cast<size_t>(3 * part) * sizeof(float);
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  return Status::Ok();
}

std::span<float> ExpertWorkingSet::Grad(int layer, int expert, int part) {
  SY_CHECK(part >= 0 && part < 3) << "expert part " << part;
  if (auto it = layers_.find(layer); it != layers_.end()) {
    if (auto slot = it->second.slot.find(expert); slot != it->second.slot.end()) {
      const BoundExperts& t = it->second.host;
      const Tensor g = (part == 0   ? t.dw_gate
                        : part == 1 ? t.dw_up
                                    : t.dw_down)
                           .Select(slot->second);
      return {g.data<float>(), static_cast<size_t>(g.numel())};
    }
  }
  auto only = gradient_only_.find({layer, expert});
  if (only == gradient_only_.end()) return {};
  const size_t n = static_cast<size_t>(hidden_ * intermediate_);
  return {only->second.data<float>() + static_cast<size_t>(part) * n, n};
}

void ExpertWorkingSet::Clear() {
  store_->UnbindAll();
  layers_.clear();
  gradient_only_.clear();
  bytes_ = 0;
}

}  // namespace sy::launcher
