// Workspace: the memory of one forward step's activations and scratch, planned once and reused,
// so that a steady-state step allocates nothing (as ggml plans its graph's memory, or as a
// TensorRT-LLM kernel takes its workspace).
//
// A workspace holds two arenas, one of device memory and one of host memory (page-locked where
// the backend has it, for staging copies). While a WorkspaceBinding binds it to a backend, every
// Backend::Allocate and Backend::AllocateHost called on the binding thread is carved from the
// matching arena: a pointer bump, no allocator call, no lock. Nothing is freed one by one;
// memory comes back when the owner rewinds:
//
//   Workspace ws(backend);
//   for (each step) {
//     SY_RETURN_IF_ERROR(ws.Reset());            // rewinds; grows the arenas if a step overflowed
//     WorkspaceBinding bind(backend, ws);
//     ... tensors that live for the whole step ...
//     for (each layer) {
//       const Workspace::Mark mark = ws.mark();
//       ... the layer's activations ...             // every Allocate of the layer's code
//       ws.Rewind(mark);                            // the next layer reuses the same bytes
//     }
//   }
//
// Planning. The arenas are sized by use: a request past an arena's end is served by the
// backend's allocator instead (counted in overflows()), and the arena records how far the step
// would have reached. The next Reset replaces an arena that was too small by one of that size
// (the only allocation), so from the second step of a given shape on, a step allocates nothing.
// Reserve() sizes the arenas up front.
//
// Lifetime rules. A tensor carved from a workspace is valid until the workspace rewinds past it
// (Rewind to an earlier mark, or Reset). Memory that must outlive the step (weights, caches,
// slots) must not be allocated while a workspace is bound on that thread. Copies on other streams
// that read workspace memory must be ordered before it is reused, as with the caching allocator.
//
// Ownership: the workspace owns its arenas; carved tensors share the arena's buffer, so a stale
// view never dangles, it only sees reused bytes. Thread-safety: one thread at a time (the thread
// that drives the backend's compute stream); a binding affects only the thread that made it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/backend/backend.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace sy {

class Workspace {
 public:
  // Where both arenas stand: what Rewind goes back to.
  struct Mark {
    size_t device = 0;
    size_t host = 0;
  };

  explicit Workspace(Backend& backend);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // A contiguous tensor from the device (host) arena, or, past its end, from the backend's
  // allocator. ResourceExhausted when that fails.
  Result<Tensor> Take(DType dtype, Shape shape);
  Result<Tensor> TakeHost(DType dtype, Shape shape);

  Mark mark() const { return Mark{device_.offset, host_.offset}; }
  // Gives back everything taken since `mark` (which must not be ahead of the current position).
  void Rewind(const Mark& mark);
  // Rewinds to empty and grows each arena that a step overflowed to the furthest it reached.
  // Call it between steps, while the workspace is not bound.
  Status Reset();
  // Grows the arenas to at least these sizes now (bytes).
  Status Reserve(size_t device_bytes, size_t host_bytes);

  Backend& backend() const { return backend_; }
  size_t device_capacity() const { return device_.capacity; }
  size_t host_capacity() const { return host_.capacity; }
  // The furthest either arena reached since creation (the size a step of that shape needs).
  size_t device_peak() const { return device_.peak; }
  size_t host_peak() const { return host_.peak; }
  // Requests that did not fit the arena and went to the allocator, since creation.
  int64_t overflows() const { return device_.overflows + host_.overflows; }
  // Requests served, since creation.
  int64_t takes() const { return device_.takes + host_.takes; }
  bool bound() const { return bound_; }

 private:
  friend class WorkspaceBinding;
  struct Arena {
    Tensor buffer;        // u8 [capacity]
    size_t capacity = 0;  // bytes
    size_t offset = 0;    // bytes taken so far, counting what overflowed to the allocator
    size_t peak = 0;      // the largest offset since creation
    int64_t overflows = 0;
    int64_t takes = 0;
  };
  Result<Tensor> TakeFrom(Arena& arena, bool host, DType dtype, Shape shape);
  Status Grow(Arena& arena, bool host, size_t bytes);

  Backend& backend_;
  Arena device_;
  Arena host_;
  bool bound_ = false;
};

// Binds `workspace` to `backend` for the calling thread until destroyed (see Workspace). A
// backend has at most one binding at a time (checked).
class WorkspaceBinding {
 public:
  WorkspaceBinding(Backend& backend, Workspace& workspace);
  ~WorkspaceBinding();
  WorkspaceBinding(const WorkspaceBinding&) = delete;
  WorkspaceBinding& operator=(const WorkspaceBinding&) = delete;

 private:
  Backend& backend_;
  Workspace& workspace_;
};

}  // namespace sy
