#include "runtime/sim/sim_link_check.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "runtime/sim/sim_backend.h"

namespace sy {
namespace {

// The fastest of three runs of `run`, in seconds.
double BestSeconds(const std::function<void()>& run) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

Result<SimLinkCheck> CheckSimLink(double link_gbps) {
  BackendOptions options;
  options.sim.link_gbps = link_gbps;
  SimBackend sim(options);
  const int64_t n = int64_t{16} << 20;  // 64 MiB of f32
  SY_ASSIGN_OR_RETURN(Tensor host, sim.AllocateHost(DType::kF32, {n}));
  SY_ASSIGN_OR_RETURN(Tensor dev, sim.Allocate(DType::kF32, {n}));
  std::memset(host.data(), 0, host.nbytes());  // first-touch page faults are not link time
  sim.Fill(dev, 0.0f);
  const double bytes = static_cast<double>(host.nbytes());
  SimLinkCheck check;
  check.link_gbps = link_gbps;
  check.memcpy_gbps =
      bytes / BestSeconds([&] { std::memcpy(dev.data(), host.data(), host.nbytes()); }) / 1e9;
  auto stream = sim.CreateStream();
  check.achieved_gbps = bytes / BestSeconds([&] {
                          sim.CopyAsync(host, dev, *stream);
                          sim.SynchronizeStream(*stream);
                        }) /
                        1e9;
  check.expected_gbps = std::min(link_gbps, check.memcpy_gbps);
  check.passed =
      check.achieved_gbps <= link_gbps * 1.01 && check.achieved_gbps >= 0.5 * check.expected_gbps;
  return check;
}

}  // namespace sy
