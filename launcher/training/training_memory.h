// The memory a training config implies, from its sizes alone, before anything is built: so that a
// config that cannot fit (a batch of 10^8 rows, a sequence of 16 M tokens, a model of 10^9
// layers) fails at once with the key to lower, instead of after minutes of swapping or an abort.
//
// The estimate counts what one step must hold at once at its peak, in f32: every parameter with
// its gradient and optimizer moments (and the host masters of a device backend); the activations
// the forward keeps for the backward (per token and layer: the residual stream, the norms, q/k/v
// and their rotated copies, the attention output, the router's logits and probabilities, the
// top-k copies of the token for the experts and the experts' gate, up and activation rows, or
// the dense MLP's), the backward temporaries of the largest layer, the logits and their gradient;
// and the token and target ids of a train and an eval batch. Allocator slack and the operators'
// scratch are left out. For examples/configs/tiny.json it comes to 22.3 KB per token of a step;
// the measured peak resident size grows by 22.0 KB per token (batch 4800 -> 19200, one step on
// cpu). (`switchyard plan` can share this arithmetic.)
//
// Distributed: per rank (batch_size / world rows, experts / ep_size, the dense state / world under
// ZeRO-3), and the ranks of one node share its memory.
//
// With expert_store.dir the experts' optimizer states are on the store: memory holds the cache
// (cache_mib) and the experts' compute copy, which is every local expert's weight and gradient
// (on cuda) or, on cpu or sim (one process or mpirun, any parallel.ep_size), the working set of
// the experts a step activates
// (at most min(local experts, global batch tokens x top_k) per MoE layer, 8 B per parameter, 16 B
// on sim; launcher/training/expert_working_set.h).
//
// The memory available to check against: AvailableHostMemory (runtime/core/host_memory.h).
//
// Ownership: value types. Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "launcher/training/train_options.h"
#include "runtime/core/host_memory.h"
#include "runtime/core/status.h"

namespace sy::launcher {

struct TrainingMemoryEstimate {
  double parameter_bytes = 0;    // values, gradients, optimizer moments (and host masters)
  double activation_bytes = 0;   // one step's kept activations and logits, on the device
  double data_bytes = 0;         // a train and an eval batch of token and target ids
  double bytes_per_token = 0;    // activation_bytes + data_bytes per token of a step
  double tokens_per_step = 0;    // this rank's rows x seq_len
  double store_cache_bytes = 0;  // expert_store.cache_mib, within parameter_bytes
  double total() const { return parameter_bytes + activation_bytes + data_bytes; }
};

// The estimate for one rank of `world_size` (1 in one process). `vocab_size` is the model's
// (the data's when model.vocab_size is 0).
TrainingMemoryEstimate EstimateTrainingMemory(const TrainConfig& config, int64_t vocab_size,
                                              int world_size);

// Whether the trainer computes the experts through the expert store's working set
// (launcher/training/expert_working_set.h): whenever expert_store.dir is set, on any backend (cpu,
// sim, cuda), in one process or under mpirun, with or without expert replicas (Note [working set
// over ranks] in trainer.cc).
bool UsesExpertWorkingSet(const TrainConfig& config);

// The working set's largest size on one rank of `world_size` for a model of `moe_layers` MoE
// layers: f32 weight and gradient (8 B per parameter) of at most one expert per routed token-slot
// of the global batch (a rank's experts take rows from every rank; with replicas, the gradients
// of the experts only another replica activated, 4 B per parameter, count within that bound),
// and at most the rank's experts, per MoE layer; on a device (sim) twice that (the device
// tensors and their host copies).
double ExpertWorkingSetBytes(const TrainConfig& config, double moe_layers, int world_size);

// OK when `estimate` fits in `available_bytes`; otherwise ResourceExhausted that names the one
// key to lower and the largest value that would fit: expert_store.cache_mib when the store's
// cache is most of the parameters' memory and a smaller one fits, model.* when the parameters
// alone do not fit, data.seq_len when one example does not, else data.batch_size.
Status CheckTrainingMemory(const TrainConfig& config, const TrainingMemoryEstimate& estimate,
                           double available_bytes, int world_size);

}  // namespace sy::launcher
