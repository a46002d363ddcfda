// `switchyard selftest`: the backend self-check. Runs every operator and every backward on each
// available device against the plain reference implementations (the op-check harness), checks the
// reference backwards by finite differences, and measures the sim link against its setting.
// Exits non-zero if anything fails.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/version.h"
#include "runtime/backend/backend.h"
#include "runtime/opcheck/op_check.h"
#include "runtime/sim/sim_backend.h"

namespace sy::launcher {
namespace {

class SelftestCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--device", devices_,
                   "Devices to check (cpu, sim, cuda:N); default: every available one");
    app.add_option("--sim-link-gbps", link_gbps_, "Sim link bandwidth for the link check, GB/s")
        ->check(CLI::PositiveNumber);
    app.add_flag("--verbose", verbose_, "Print every case, not one line per operator");
  }

  int Run() override {
    std::printf("%s\n", VersionText().c_str());
    std::vector<Device> devices;
    if (devices_.empty()) {
      devices = AvailableDevices();
    } else {
      for (const std::string& text : devices_) {
        Result<Device> device = ParseDevice(text);
        if (!device.ok()) {
          PrintError(device.status().WithContext("--device"));
          return 1;
        }
        devices.push_back(*device);
      }
    }
    int failures = 0;
    for (const Device& device : devices) failures += CheckDevice(device);
    failures += CheckGradients();
    failures += CheckSimLink();
    std::printf("\nselftest: %s (%d failure%s)\n", failures == 0 ? "PASSED" : "FAILED", failures,
                failures == 1 ? "" : "s");
    return failures == 0 ? 0 : 1;
  }

 private:
  int CheckDevice(const Device& device) {
    Result<std::unique_ptr<Backend>> backend = CreateBackend(device);
    if (!backend.ok()) {
      PrintError(backend.status());
      return 1;
    }
    std::printf("== operators on %s\n", (*backend)->name().c_str());
    struct Summary {
      int cases = 0;
      int failed = 0;
      double worst_ratio = 0;  // nmse / threshold of the worst case
    };
    std::map<std::string, Summary> by_op;
    std::vector<std::string> order;
    auto start = std::chrono::steady_clock::now();
    for (const OpCheckCase& c : AllOpChecks()) {
      OpCheckResult r = c.run(**backend);
      if (!by_op.count(c.op)) order.push_back(c.op);
      Summary& s = by_op[c.op];
      ++s.cases;
      if (!r.passed) ++s.failed;
      if (r.threshold > 0) s.worst_ratio = std::max(s.worst_ratio, r.nmse / r.threshold);
      if (verbose_ || !r.passed) {
        std::printf("  %-28s %-36s nmse %.2e (threshold %.1e) %s %s\n", c.op.c_str(),
                    c.case_name.c_str(), r.nmse, r.threshold, r.passed ? "ok" : "FAIL",
                    r.detail.c_str());
      }
    }
    int failed = 0;
    for (const std::string& op : order) {
      const Summary& s = by_op[op];
      failed += s.failed;
      std::printf("  %-28s %3d case%s  worst error %5.1f%% of threshold  %s\n", op.c_str(), s.cases,
                  s.cases == 1 ? " " : "s", 100.0 * s.worst_ratio, s.failed == 0 ? "PASS" : "FAIL");
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("  %zu operators checked in %.1f s\n\n", order.size(), seconds);
    return failed;
  }

  int CheckGradients() {
    std::printf("== reference backwards vs finite differences\n");
    int failed = 0;
    size_t count = 0;
    for (const GradCheckResult& r : RunReferenceGradientChecks()) {
      ++count;
      if (!r.passed || verbose_) {
        std::printf("  %-28s %-30s max rel error %.2e (threshold %.1e) %s\n", r.op.c_str(),
                    r.case_name.c_str(), r.max_rel_error, r.threshold, r.passed ? "ok" : "FAIL");
      }
      if (!r.passed) ++failed;
    }
    std::printf("  %zu gradient checks, %d failed\n\n", count, failed);
    return failed;
  }

  // The sim link performs a real memcpy and then waits out the modelled time, so it can never be
  // faster than this host's memcpy: the check compares against the slower of the two, measured
  // side by side in this run.
  int CheckSimLink() {
    BackendOptions options;
    options.sim.link_gbps = link_gbps_;
    SimBackend sim(options);
    const int64_t n = int64_t{16} << 20;  // 64 MiB of f32
    Result<Tensor> host = sim.AllocateHost(DType::kF32, {n});
    Result<Tensor> dev = sim.Allocate(DType::kF32, {n});
    if (!host.ok() || !dev.ok()) {
      PrintError(host.ok() ? dev.status() : host.status());
      return 1;
    }
    std::memset(host->data(), 0, host->nbytes());  // first-touch page faults are not link time
    sim.Fill(*dev, 0.0f);
    const double bytes = static_cast<double>(host->nbytes());
    auto best_seconds = [](const std::function<void()>& run) {
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        auto start = std::chrono::steady_clock::now();
        run();
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      return best;
    };
    double memcpy_gbps =
        bytes / best_seconds([&] { std::memcpy(dev->data(), host->data(), host->nbytes()); }) / 1e9;
    auto stream = sim.CreateStream();
    double link_achieved = bytes / best_seconds([&] {
                             sim.CopyAsync(*host, *dev, *stream);
                             sim.SynchronizeStream(*stream);
                           }) /
                           1e9;
    double expected = std::min(link_gbps_, memcpy_gbps);
    bool ok = link_achieved <= link_gbps_ * 1.01 && link_achieved >= 0.5 * expected;
    std::printf(
        "== sim link: 64 MiB host->device, link set to %.1f GB/s, host memcpy %.1f GB/s: "
        "%.2f GB/s achieved (%.0f%% of the slower) %s\n",
        link_gbps_, memcpy_gbps, link_achieved, 100.0 * link_achieved / expected,
        ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  }

  std::vector<std::string> devices_;
  double link_gbps_ = 25.0;
  bool verbose_ = false;
};

}  // namespace

SY_REGISTER_COMMAND("selftest", "Check every operator on every device against the reference",
                    SelftestCommand);

}  // namespace sy::launcher
