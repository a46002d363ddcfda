// Flat vs hierarchical all-to-all (MoESys Fig. 8), side by side in one MPI job.
//
//   mpirun -np 4 sy_all_to_all_bench [--ranks-per-node 2] [--min-bytes 4096]
//                                    [--max-bytes 16777216] [--seconds-per-size 2]
//
// Every rank sends the same number of bytes to every rank (the per-peer message size), for sizes
// from --min-bytes to --max-bytes in steps of 4x. The two algorithms alternate iteration by
// iteration, each after a barrier, so both see the same machine noise; an iteration's time is the
// slowest rank's. Rank 0 prints the median per algorithm and the ratio hierarchical / flat. Both
// outputs are compared once per size, so the numbers are for correct exchanges.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/all_to_all.h"
#include "parallel/mpi_environment.h"
#include "parallel/topology.h"
#include "runtime/core/statistics.h"

namespace sy {
namespace {

struct BenchOptions {
  int ranks_per_node = 2;         // emulated node size; 0 = real nodes
  size_t min_bytes = 4096;        // per peer
  size_t max_bytes = 16u << 20;   // per peer
  double seconds_per_size = 2.0;  // time budget per message size (both algorithms together)
};

Result<BenchOptions> ParseArgs(int argc, char** argv) {
  BenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return InvalidArgumentError(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--ranks-per-node") {
      options.ranks_per_node = std::atoi(value);
    } else if (flag == "--min-bytes") {
      options.min_bytes = std::strtoull(value, nullptr, 10);
    } else if (flag == "--max-bytes") {
      options.max_bytes = std::strtoull(value, nullptr, 10);
    } else if (flag == "--seconds-per-size") {
      options.seconds_per_size = std::atof(value);
    } else {
      return InvalidArgumentError("unknown flag " + flag +
                                  "; flags: --ranks-per-node --min-bytes --max-bytes "
                                  "--seconds-per-size");
    }
  }
  if (options.min_bytes == 0 || options.min_bytes > options.max_bytes) {
    return InvalidArgumentError("--min-bytes must be > 0 and <= --max-bytes");
  }
  return options;
}

// One timed run: barrier, the exchange, then the slowest rank's time in microseconds.
double TimeOnce(Communicator& world, AllToAll& a2a, const AllToAllPlan& plan, const void* send,
                void* recv, void* workspace) {
  SY_CHECK_OK(world.Barrier());
  const auto start = std::chrono::steady_clock::now();
  SY_CHECK_OK(a2a.Forward(plan, send, recv, workspace));
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  SY_CHECK_OK(world.AllReduce(&us, &us, 1, DType::kF64, Reduction::kMax));
  return us;
}

int Run(int argc, char** argv) {
  MpiEnvironmentOptions env_options;
  env_options.world.timeout = std::chrono::minutes(2);
  Result<std::unique_ptr<MpiEnvironment>> env = MpiEnvironment::Create(&argc, &argv, env_options);
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().ToString().c_str());
    return 1;
  }
  MpiCommunicator& world = (*env)->world();
  const bool root = world.rank() == 0;
  Result<BenchOptions> options = ParseArgs(argc, argv);
  if (!options.ok()) {
    if (root) std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  Result<std::unique_ptr<Topology>> topology =
      Topology::Create(world, TopologyOptions{.ranks_per_node = options->ranks_per_node});
  if (!topology.ok()) {
    if (root) std::fprintf(stderr, "%s\n", topology.status().ToString().c_str());
    return 2;
  }
  Result<AllToAll> flat = AllToAll::Create(**topology, AllToAllAlgorithm::kFlat);
  Result<AllToAll> hier = AllToAll::Create(**topology, AllToAllAlgorithm::kHierarchical);
  SY_CHECK_OK(flat.status());
  SY_CHECK_OK(hier.status());
  const int P = world.size();
  if (root) {
    std::printf("# %d ranks as %s; per-peer message size; median of interleaved runs\n", P,
                (*topology)->layout().ToString().c_str());
    std::printf("%12s %8s %12s %12s %10s %12s %12s\n", "bytes/peer", "iters", "flat_us", "hier_us",
                "hier/flat", "flat_GB/s", "hier_GB/s");
  }

  for (size_t bytes = options->min_bytes; bytes <= options->max_bytes; bytes *= 4) {
    std::vector<size_t> counts(static_cast<size_t>(P), bytes);
    Result<AllToAllPlan> flat_plan = flat->MakePlan(counts, 1);
    Result<AllToAllPlan> hier_plan = hier->MakePlan(counts, 1);
    SY_CHECK_OK(flat_plan.status());
    SY_CHECK_OK(hier_plan.status());
    std::vector<uint8_t> send(bytes * P);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<uint8_t>(i * 7 + world.rank());
    std::vector<uint8_t> flat_recv(bytes * P), hier_recv(bytes * P);
    std::vector<uint8_t> workspace(hier_plan->workspace_bytes());

    // Warm up (page faults, MPI connections) and check that both give the same bytes.
    const double first_flat =
        TimeOnce(world, *flat, *flat_plan, send.data(), flat_recv.data(), nullptr);
    const double first_hier =
        TimeOnce(world, *hier, *hier_plan, send.data(), hier_recv.data(), workspace.data());
    SY_CHECK(flat_recv == hier_recv)
        << "hierarchical and flat outputs differ at " << bytes << " bytes per peer";
    // Enough iterations to fill the time budget, judged from the warm-up, between 5 and 200.
    double iters_wanted = options->seconds_per_size * 1e6 / std::max(1.0, first_flat + first_hier);
    int iters = static_cast<int>(std::clamp(iters_wanted, 5.0, 200.0));
    SY_CHECK_OK(world.Broadcast(&iters, 1, DType::kI32, 0));

    std::vector<double> flat_us, hier_us;
    for (int it = 0; it < iters; ++it) {
      flat_us.push_back(TimeOnce(world, *flat, *flat_plan, send.data(), flat_recv.data(), nullptr));
      hier_us.push_back(
          TimeOnce(world, *hier, *hier_plan, send.data(), hier_recv.data(), workspace.data()));
    }
    if (root) {
      const double f = Median(flat_us);
      const double h = Median(hier_us);
      // Bytes each rank sends to the other ranks, over the time.
      const double moved = static_cast<double>(bytes) * (P - 1);
      std::printf("%12zu %8d %12.1f %12.1f %10.2f %12.3f %12.3f\n", bytes, iters, f, h, h / f,
                  moved / f / 1e3, moved / h / 1e3);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace sy

int main(int argc, char** argv) { return sy::Run(argc, argv); }
