// ExpertWorkingSet: the compute copy of the experts a step activates, for training on the expert
// store without a copy of every expert in memory (ExpertStateStoreOptions::resident false; the
// trainer uses it on a host backend in one process or under mpirun, with or without expert
// replicas: Note [working set over ranks] in launcher/training/trainer.cc). Under expert
// parallelism it binds the rank's own experts that receive rows after the all-to-all of the
// counts, and with replicas a gradient for those another replica activated (BindGradient).
//
// It is the ExpertWeightSource of every MoE layer's bound LocalExpertCompute (Note [bound experts]
// in runtime/model/expert_compute.h). At a layer's Forward, Bind allocates stacked f32 weights and
// zeroed f32 gradients for the experts with rows, binds them to the store's entries
// (ExpertStateStore::Bind) and has the store fill the weights from the master (Prepare, which
// replays the updates an expert missed first, in exact mode). Backward accumulates the gradients
// there; the trainer reads them for the gradient norm and clipping (Grad), the store's Update
// reads them, and Clear releases everything at the end of the step. A second Forward of a layer
// before Clear (an evaluation between steps) replaces that layer's experts.
//
// On a device backend (sim, cuda; not host memory) the store fills host copies, Bind uploads them
// into device tensors and zeroes device gradients there, and DownloadGradients brings the
// gradients back into the host copies after the backward, where Grad, the norm and the store's
// Update read them (Note [working set on a device]).
//
// Memory: 8 B per parameter of each activated expert (weight and gradient), for one step; on a
// device as much again on the host (its copies); 4 B per parameter of each expert bound by
// BindGradient. The model holds no other expert weights.
//
// Mixed precision (a 16-bit compute dtype): the compute's weights are the f32 weights' rounding
// to it (the compute copy of Note [mixed precision] in runtime/model/moe_model.h), 2 B more per
// parameter on the host; on a device those go up instead of the f32 ones (half the link's bytes)
// and take 2 B there. The gradients stay f32.
//
// Ownership: borrows the store and the backend, which must outlive it; owns the tensors it binds
// (the compute keeps views of them until its Release). Thread-safety: none; the trainer's thread.
// Ordering: Bind returns with the uploads done (it synchronizes the compute stream), and so does
// DownloadGradients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "launcher/training/expert_state_store.h"
#include "runtime/backend/backend.h"
#include "runtime/model/expert_compute.h"

namespace sy::launcher {

class ExpertWorkingSet final : public ExpertWeightSource {
 public:
  // Experts of `hidden` x `intermediate` (w_gate, w_up [I, H]; w_down [H, I]: the store entries'
  // three parts in that order), computed on `backend`.
  // `compute_dtype`: f32, or the 16-bit dtype of mixed-precision training.
  ExpertWorkingSet(ExpertStateStore* store, Backend& backend, int64_t hidden, int64_t intermediate,
                   DType compute_dtype = DType::kF32);
  // Clear: the store's offered masters read the bound weights until withdrawn (its prefetcher's
  // loads may still run), so they are withdrawn before the weights go.
  ~ExpertWorkingSet() override;
  ExpertWorkingSet(const ExpertWorkingSet&) = delete;
  ExpertWorkingSet& operator=(const ExpertWorkingSet&) = delete;

  Result<BoundExperts> Bind(int layer, int first_expert,
                            std::span<const int64_t> group_rows) override;
  // On a device backend: copies every bound gradient to its host copy (after Backward, before
  // Grad and the store's Update). Nothing on a host backend.
  void DownloadGradients();
  // Replicas (Note [working set over ranks] in launcher/training/trainer.cc): binds a zeroed host
  // gradient, and no weights, to global expert `expert` of decoder layer `layer`, an expert
  // another replica activated and this one did not, for the sum over the replicas and the
  // store's Update (which activates it when the sum is not zero). After DownloadGradients, until
  // Clear; the expert must not be bound already. ResourceExhausted naming the expert when the
  // memory cannot be had.
  Status BindGradient(int layer, int expert);
  // The gradient of part `part` (0 w_gate, 1 w_up, 2 w_down) of global expert `expert` of decoder
  // layer `layer`, on the host (BindGradient's too); empty when that expert is not in the working
  // set (its gradient is zero).
  std::span<float> Grad(int layer, int expert, int part);
  // Unbinds and releases every layer's experts.
  void Clear();

  size_t bytes() const { return bytes_; }                         // held now
  size_t gradient_only() const { return gradient_only_.size(); }  // BindGradient's, now
  size_t peak_bytes() const { return peak_bytes_; }

 private:
  struct Layer {
    std::map<int, int64_t> slot;  // global expert -> its index in the stacked tensors
    BoundExperts host;            // the store's view (host memory)
    BoundExperts narrow;          // mixed precision: the host weights rounded to compute_dtype_
    BoundExperts device;          // the compute's (the host tensors on a host backend)
  };
  void Drop(int layer);
  // The f32 weights and gradients of `experts` bound experts, twice on a device (host copies).
  size_t LayerBytes(int64_t experts) const;

  ExpertStateStore* store_;
  Backend& backend_;
  bool on_device_;  // the backend's memory is not the host's
  int64_t hidden_, intermediate_;
  DType compute_dtype_;
  std::map<int, Layer> layers_;  // by decoder layer
  // BindGradient's: (decoder layer, expert) -> its three parts' gradients, one after another.
  std::map<std::pair<int, int>, Tensor> gradient_only_;
  size_t bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace sy::launcher
