// `switchyard selftest`: the backend self-check. Runs every operator and every backward on each
// available device against the plain reference implementations (runtime/opcheck/backend_check.h),
// checks the reference backwards by finite differences (runtime/opcheck/op_check.h), and, when sim
// is among the devices, measures the sim link against its setting (runtime/sim/sim_link_check.h).
// Exits non-zero if anything fails.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "launcher/command.h"
#include "launcher/version.h"
#include "runtime/backend/backend.h"
#include "runtime/opcheck/backend_check.h"
#include "runtime/opcheck/op_check.h"
#include "runtime/sim/sim_link_check.h"

namespace sy::launcher {
namespace {

class SelftestCommand : public Command {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--device", devices_,
                   "Devices to check (cpu, sim, cuda:N); default: every available one");
    app.add_option("--sim-link-gbps", link_gbps_, "Sim link bandwidth for the link check, GB/s")
        ->check(NumberRange(0.001, 100000));
    app.add_flag("--verbose", verbose_, "Print every case, not one line per operator");
    AddThreadsOption(app, &threads_);
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
    // The sim link's timing belongs to the sim device: checked when sim is.
    const bool sim = std::any_of(devices.begin(), devices.end(),
                                 [](const Device& d) { return d.type == DeviceType::kSim; });
    if (sim) failures += CheckLink();
    std::printf("\nselftest: %s (%d failure%s)\n", failures == 0 ? "PASSED" : "FAILED", failures,
                failures == 1 ? "" : "s");
    return failures == 0 ? 0 : 1;
  }

 private:
  int CheckDevice(const Device& device) {
    BackendOptions options;
    options.num_threads = threads_;
    Result<std::unique_ptr<Backend>> backend = CreateBackend(device, options);
    if (!backend.ok()) {
      PrintError(backend.status());
      return 1;
    }
    std::printf("== operators on %s\n", (*backend)->name().c_str());
    const BackendCheckReport report = CheckBackendOps(**backend, [&](const OpCheckResult& r) {
      if (verbose_ || !r.passed) {
        std::printf("  %-28s %-36s nmse %.2e (threshold %.1e) %s %s\n", r.op.c_str(),
                    r.case_name.c_str(), r.nmse, r.threshold, r.passed ? "ok" : "FAIL",
                    r.detail.c_str());
      }
    });
    for (const OpCheckSummary& s : report.ops) {
      std::printf("  %-28s %3d case%s  worst error %5.1f%% of threshold  %s\n", s.op.c_str(),
                  s.cases, s.cases == 1 ? " " : "s", 100.0 * s.worst_ratio,
                  s.failed == 0 ? "PASS" : "FAIL");
    }
    std::printf("  %zu operators checked in %.1f s\n\n", report.ops.size(), report.seconds);
    return report.failed;
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

  int CheckLink() {
    Result<SimLinkCheck> check = CheckSimLink(link_gbps_);
    if (!check.ok()) {
      PrintError(check.status());
      return 1;
    }
    std::printf(
        "== sim link: 64 MiB host->device, link set to %.1f GB/s, host memcpy %.1f GB/s: "
        "%.2f GB/s achieved (%.0f%% of the slower) %s\n",
        check->link_gbps, check->memcpy_gbps, check->achieved_gbps,
        100.0 * check->achieved_gbps / check->expected_gbps, check->passed ? "PASS" : "FAIL");
    return check->passed ? 0 : 1;
  }

  std::vector<std::string> devices_;
  double link_gbps_ = 25.0;
  bool verbose_ = false;
  int threads_ = 0;
};

}  // namespace

SY_REGISTER_COMMAND("selftest", "Check every operator on every device against the reference",
                    SelftestCommand);

}  // namespace sy::launcher
