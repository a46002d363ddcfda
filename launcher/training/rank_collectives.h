// Rank collectives: the few whole-vector collectives the distributed trainer builds on the
// Communicator's element calls (parallel/communicator.h): a Status agreed from one rank, a vector
// of unknown length from one rank, variable-length gathers, and packed all-reduces of gradient
// spans.
//
// Every function is collective over `comm`: each rank calls it in the same order with the same
// `root`. Errors are the communicator's.
// Ownership: the caller's buffers; nothing is kept. Thread-safety: as the communicator (one
// thread drives it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "parallel/communicator.h"
#include "runtime/core/status.h"

namespace sy::launcher {

// Every rank returns the status `root` passes in (the others' `status` is ignored), so a failure
// seen by one rank ends the operation on all of them.
Status BroadcastStatus(Communicator& comm, const Status& status, int root = 0);

// `data` from `root` on every rank (resized to root's size on the others).
template <typename T>
Status BroadcastVector(Communicator& comm, std::vector<T>& data, int root = 0) {
  int64_t n = static_cast<int64_t>(data.size());
  SY_RETURN_IF_ERROR(comm.Broadcast<int64_t>(std::span<int64_t>(&n, 1), root));
  data.resize(static_cast<size_t>(n));
  return comm.Broadcast<T>(std::span<T>(data), root);
}

// Every rank's `local` concatenated in rank order into `all`, and where each rank's part starts
// in `offsets` (comm.size() + 1 entries, the last one all->size()).
template <typename T>
Status AllGatherVector(Communicator& comm, const std::vector<T>& local, std::vector<T>* all,
                       std::vector<size_t>* offsets) {
  const size_t p = static_cast<size_t>(comm.size());
  std::vector<int64_t> counts(p);
  const int64_t mine = static_cast<int64_t>(local.size());
  SY_RETURN_IF_ERROR(comm.AllGather<int64_t>(std::span<const int64_t>(&mine, 1), counts));
  std::vector<size_t> sizes(p), displs(p);
  offsets->assign(p + 1, 0);
  for (size_t r = 0; r < p; ++r) {
    sizes[r] = static_cast<size_t>(counts[r]);
    displs[r] = (*offsets)[r];
    (*offsets)[r + 1] = (*offsets)[r] + sizes[r];
  }
  all->resize((*offsets)[p]);
  return comm.AllGatherV<T>(std::span<const T>(local), std::span<T>(*all), sizes, displs);
}

// Sums `spans` elementwise over `comm`, in place, as one packed all-reduce (spans in the same
// order and of the same sizes on every rank). Nothing to do on a communicator of one rank.
Status AllReduceSpans(Communicator& comm, std::span<const std::span<float>> spans);

// One packed all-reduce per group of spans (AllReduceSpans of each group, in order; the same
// groups in the same order on every rank). Each call's length, and each element's offset in it,
// depend only on its own group, so a group's sums are the same bits whichever other groups are
// reduced with it: MPI chooses the algorithm, and so each element's summation order, from those
// two alone (Note [working set over ranks] in launcher/training/trainer.cc).
Status AllReduceEach(Communicator& comm, std::span<const std::vector<std::span<float>>> groups);

}  // namespace sy::launcher
