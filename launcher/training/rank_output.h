// Rank output: where one rank of a distributed `switchyard train` prints, and whether it was
// started by mpirun.
//
// Rank 0 prints to stdout as a single process does. The other ranks print nothing, unless
// --log-all-ranks is given: then every rank, rank 0 included, prints to stdout with each line
// prefixed "[rank r] " (mpirun interleaves the ranks' lines).
//
// Ownership: RankOutput owns the FILE it opens and closes it on destruction (stdout is borrowed).
// Thread-safety: one thread at a time, as a FILE.
#pragma once

#include <cstdio>

namespace sy::launcher {

// True when this process was started by an MPI launcher (Open MPI's mpirun, or a PMI/PMIx one):
// the environment names its rank in a job.
bool LaunchedByMpi();

class RankOutput {
 public:
  // `rank` of a job of `size` ranks (size 1: stdout, unprefixed).
  RankOutput(int rank, int size, bool all_ranks);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  // Where this rank prints: stdout, a prefixing stream over it, or a stream that discards.
  std::FILE* file() const { return file_; }

 private:
  std::FILE* file_ = stdout;
  bool owned_ = false;
};

}  // namespace sy::launcher
