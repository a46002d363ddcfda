// Host memory: what this machine has and what this process can still take, for the checks that
// refuse a budget before it is allocated (training's memory estimate, the server's KV cache, the
// expert store's cache) and for `switchyard plan`.
//
// Ownership: value types. Thread-safety: reads /proc and /sys on each call; safe from any thread.
#pragma once

#include <string>

namespace sy {

// MemTotal from /proc/meminfo, in bytes; 0 when unknown.
double TotalHostMemory();

// The memory this process can still take: MemAvailable, bounded by the cgroup's limit (a
// container's), divided among the ranks of this node under mpirun (OMPI_COMM_WORLD_LOCAL_SIZE).
// 0 when unknown (then nothing is checked).
double AvailableHostMemory();

// "1.5 GiB", "23.9 TiB", "512 B": a size for people, in the largest binary unit under it.
std::string FormatMemory(double bytes);

}  // namespace sy
