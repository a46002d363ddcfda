#include "runtime/backend/backend.h"

#include "runtime/backend/workspace.h"

namespace sy {

Result<Tensor> Backend::Allocate(DType dtype, Shape shape) {
  if (Workspace* workspace = bound_workspace()) return workspace->Take(dtype, shape);
  return AllocateDevice(dtype, shape);
}

Result<Tensor> Backend::AllocateHost(DType dtype, Shape shape) {
  if (Workspace* workspace = bound_workspace()) return workspace->TakeHost(dtype, shape);
  return AllocatePersistentHost(dtype, shape);
}

Result<Tensor> Backend::AllocatePersistentHost(DType dtype, Shape shape) {
  host_allocations_.fetch_add(1, std::memory_order_relaxed);
  return AllocatePinnedHost(dtype, shape);
}

Workspace* Backend::bound_workspace() const {
  Workspace* workspace = workspace_.load(std::memory_order_acquire);
  if (workspace == nullptr) return nullptr;
  if (workspace_thread_.load(std::memory_order_relaxed) != std::this_thread::get_id())
    return nullptr;
  return workspace;
}

}  // namespace sy
