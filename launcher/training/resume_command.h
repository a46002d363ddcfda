// ResumeCommand: the exact command that resumes a distributed run on fewer ranks after it lost
// some (docs/training.md "Resuming at another size"). The checkpoint is consolidated (every
// expert under its global id, ZeRO-3's shards and the embedding columns gathered), so it loads at
// any world size the config admits; this picks the largest world below the lost run's that does,
// and the parallel settings it needs there.
//
// Pure function; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "launcher/training/train_options.h"

namespace sy::launcher {

// Whether `config` admits a world of `world` ranks (ep_size and ranks_per_node divide it, the
// batch divides over it, the per-task placement fits), and why not.
Status CheckWorldSize(const TrainConfig& config, int world);

// "mpirun -np M BINARY train --config PATH --set k=v ... --set parallel.ep_size=G --resume" for
// the largest M < `world` that the config admits with parallel.ep_size lowered to a divisor of M
// (and of the experts) where it must be, or "BINARY train ... --resume" when that is one process.
// The overrides are the run's own, quoted for a POSIX shell. A run without checkpoint.dir has
// nothing to resume: the text says to set it.
std::string ResumeCommand(const TrainConfig& config, const std::string& binary,
                          const std::string& config_path, const std::vector<std::string>& overrides,
                          int world);

}  // namespace sy::launcher
