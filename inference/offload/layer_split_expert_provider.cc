#include "inference/offload/layer_split_expert_provider.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "runtime/core/check.h"

namespace sy::offload {

Status LayerSplitExpertProvider::Attach(MoeModel& model,
                                        std::vector<std::unique_ptr<ExpertCompute>> computes) {
  computes.clear();  // every expert comes from the host tier or the slots
  SY_RETURN_IF_ERROR(AttachHost(model, options_.cpu_threads));
  const int slots = options_.num_slots > 0 ? options_.num_slots : DefaultDeviceSlots(layout());
  device_layers_ = std::min(slots / layout().num_experts, layout().num_layers);
  std::vector<ExpertKey> on_device;
  for (int m = 0; m < device_layers_; ++m) {
    for (int e = 0; e < layout().num_experts; ++e) {
      on_device.push_back({static_cast<uint32_t>(m), static_cast<uint32_t>(e)});
    }
  }
  const int used = static_cast<int>(on_device.size());
  SY_RETURN_IF_ERROR(AttachDevice(model, used, DeviceCachePolicy::kStatic, std::move(on_device)));
  placement_.assign(static_cast<size_t>(layout().num_experts), ExpertPlacement::kCpu);
  if (options_.log) {
    std::fprintf(stderr, "%s (of %d slots asked for)\n", Describe().c_str(), slots);
  }
  return Status::Ok();
}

std::string LayerSplitExpertProvider::Describe() const {
  const std::string layers = device_layers_ == 0
                                 ? std::string("no MoE layer")
                                 : "MoE layers 0.." + std::to_string(device_layers_ - 1);
  return "layer-split: " + layers + " (" + std::to_string(device_layers_) + " of " +
         std::to_string(layout().num_layers) + ") on the device in " +
         std::to_string(device_slots()) + " slots, the rest on the CPU executor (" +
         std::to_string(executor().num_threads()) + " threads)";
}

Status LayerSplitExpertProvider::RunExperts(Backend& backend, int moe_index, const Tensor& xs,
                                            std::span<const int64_t> group_rows, const Tensor& ys) {
  (void)backend;
  SY_CHECK_EQ(group_rows.size(), placement_.size()) << "layer-split: groups";
  std::fill(placement_.begin(), placement_.end(),
            moe_index < device_layers_ ? ExpertPlacement::kResident : ExpertPlacement::kCpu);
  return RunPlaced(moe_index, xs, group_rows, placement_, ys);
}

}  // namespace sy::offload
