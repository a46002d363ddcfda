#include "runtime/backend/workspace.h"

#include <algorithm>

#include "runtime/core/check.h"

namespace sy {
namespace {

// Every carved tensor starts on a 256-byte boundary: a cache line on every CPU and the
// alignment cudaMalloc gives.
constexpr size_t kAlignment = 256;
// Arenas grow in whole 64 KiB blocks, so a step that needs a few bytes more does not replace
// the arena for every one of them.
constexpr size_t kGrowthGranule = size_t{64} << 10;

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

Workspace::Workspace(Backend& backend) : backend_(backend) {}

Workspace::~Workspace() { SY_CHECK(!bound_) << "a Workspace destroyed while bound"; }

Result<Tensor> Workspace::Take(DType dtype, Shape shape) {
  return TakeFrom(device_, /*host=*/false, dtype, shape);
}

Result<Tensor> Workspace::TakeHost(DType dtype, Shape shape) {
  return TakeFrom(host_, /*host=*/true, dtype, shape);
}

Result<Tensor> Workspace::TakeFrom(Arena& arena, bool host, DType dtype, Shape shape) {
  const size_t bytes = DTypeBytes(dtype, shape.numel());
  const size_t at = arena.offset;
  arena.offset += RoundUp(bytes, kAlignment);
  arena.peak = std::max(arena.peak, arena.offset);
  ++arena.takes;
  if (arena.offset <= arena.capacity) {
    return Tensor(arena.buffer.buffer(), dtype, shape, at);
  }
  // Past the end: the allocator serves it this time; Reset grows the arena to the peak.
  ++arena.overflows;
  return host ? backend_.AllocatePersistentHost(dtype, shape)
              : backend_.AllocatePersistent(dtype, shape);
}

void Workspace::Rewind(const Mark& mark) {
  SY_CHECK(mark.device <= device_.offset && mark.host <= host_.offset)
      << "Workspace::Rewind to a mark ahead of the current position";
  device_.offset = mark.device;
  host_.offset = mark.host;
}

Status Workspace::Grow(Arena& arena, bool host, size_t bytes) {
  if (bytes <= arena.capacity) return Status::Ok();
  const size_t capacity = RoundUp(bytes, kGrowthGranule);
  // Drop the old arena first, so a device at its budget can hold the new one; views that still
  // point into it keep it alive until they go.
  arena.buffer = Tensor();
  arena.capacity = 0;
  Result<Tensor> buffer =
      host ? backend_.AllocatePersistentHost(DType::kU8, Shape{int64_t(capacity)})
           : backend_.AllocatePersistent(DType::kU8, Shape{int64_t(capacity)});
  if (!buffer.ok()) {
    return ResourceExhaustedError(
        "workspace: cannot grow the " + std::string(host ? "host" : "device") + " arena to " +
        std::to_string(capacity) + " bytes: " + buffer.status().message());
  }
  arena.buffer = std::move(buffer).value();
  arena.capacity = capacity;
  return Status::Ok();
}

Status Workspace::Reset() {
  SY_CHECK(!bound_) << "Workspace::Reset while bound";
  device_.offset = host_.offset = 0;
  SY_RETURN_IF_ERROR(Grow(device_, /*host=*/false, device_.peak));
  return Grow(host_, /*host=*/true, host_.peak);
}

Status Workspace::Reserve(size_t device_bytes, size_t host_bytes) {
  SY_CHECK(!bound_) << "Workspace::Reserve while bound";
  device_.peak = std::max(device_.peak, device_bytes);
  host_.peak = std::max(host_.peak, host_bytes);
  return Reset();
}

WorkspaceBinding::WorkspaceBinding(Backend& backend, Workspace& workspace)
    : backend_(backend), workspace_(workspace) {
  SY_CHECK(&workspace.backend() == &backend) << "a Workspace bound to another backend";
  SY_CHECK(backend.workspace_.load(std::memory_order_acquire) == nullptr)
      << "a backend can have one bound Workspace at a time";
  backend.workspace_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  workspace.bound_ = true;
  backend.workspace_.store(&workspace, std::memory_order_release);
}

WorkspaceBinding::~WorkspaceBinding() {
  backend_.workspace_.store(nullptr, std::memory_order_release);
  workspace_.bound_ = false;
}

}  // namespace sy
