// LayerHooks: callbacks MoeModel makes around each unit of work in Forward and Backward, so that a
// caller can manage the unit's parameters just in time (ZeRO-3 in parallel/zero3.h gathers a
// unit's sharded parameters before it runs and frees them after).
//
// Units, in forward order (MoeModel::num_units() of them):
//   0                  the token embedding (embed_tokens)
//   1 .. num_layers    decoder layer l = unit - 1 (attention, norms, dense FFN or router, pre-gate,
//                      shared experts and experts)
//   num_layers + 1     the head: final_norm and lm_head
// Forward calls BeforeForward(u), runs unit u, then AfterForward(u), for u = 0, 1, ...; Backward
// calls BeforeBackward(u), runs u's backward (which adds into u's gradients), then
// AfterBackward(u), for u = num_units - 1 down to 0. A hook's error ends Forward/Backward with
// that Status. MoeModel::UnitOf tells which unit a parameter belongs to.
//
// Ownership: MoeModel::set_layer_hooks keeps a non-owning pointer; the hooks must outlive their use
// (or be reset to null). Thread-safety: called on the thread that runs Forward/Backward; the
// compute of the unit has been issued on the backend's compute stream, not necessarily finished
// (call Backend::Synchronize before touching its memory from another thread).
#pragma once

#include "runtime/core/status.h"

namespace sy {

class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual Status BeforeForward(int unit) = 0;
  virtual Status AfterForward(int unit) = 0;
  virtual Status BeforeBackward(int unit) = 0;
  virtual Status AfterBackward(int unit) = 0;
};

}  // namespace sy
