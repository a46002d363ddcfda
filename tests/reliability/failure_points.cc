#include "tests/reliability/failure_points.h"

#include <cerrno>
#include <map>
#include <utility>

#include "runtime/core/file_creation.h"
#include "storage/fs/mem_file_system.h"

namespace sy::reliability {
namespace {

using storage::FaultInjectionFileSystem;
using storage::FaultKind;
using storage::FaultOp;
using storage::FaultPoint;
using storage::FaultRule;

struct Fault {
  FaultKind kind = FaultKind::kError;
  int error = EIO;
  const char* name = "";
};

// The faults a call of kind `op` can meet.
std::vector<Fault> FaultsFor(FaultOp op) {
  std::vector<Fault> faults = {{FaultKind::kError, EIO, "EIO"}};
  if (op != FaultOp::kRead) faults.push_back({FaultKind::kError, ENOSPC, "ENOSPC"});
  if (op == FaultOp::kWrite) {
    faults.push_back({FaultKind::kTornWrite, EIO, "torn write + crash"});
  } else {
    faults.push_back({FaultKind::kCrash, EIO, "crash"});
  }
  return faults;
}

// A point as a rule can name it: the `skip`-th call of kind `op` on a path containing `path`.
struct NamedPoint {
  FaultOp op;
  std::string path;
  int64_t skip = 0;
};

// A temporary's name is new in every run ("x.tmp.<pid>.<hex>", runtime/core/file_creation.h):
// a rule names it by "x.tmp.", which every run's temporary of x contains.
std::string StableName(const std::string& path) {
  const size_t at = path.rfind(".tmp.");
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (at == std::string::npos || TemporaryPathOwner(name) < 0) return path;
  return path.substr(0, at + 5);
}

std::vector<NamedPoint> NamePoints(const std::vector<FaultPoint>& journal) {
  std::vector<NamedPoint> points;
  for (size_t i = 0; i < journal.size(); ++i) {
    const std::string name = StableName(journal[i].path);
    int64_t earlier = 0;
    for (size_t j = 0; j < i; ++j) {
      if (journal[j].op == journal[i].op && journal[j].path.find(name) != std::string::npos) {
        ++earlier;
      }
    }
    points.push_back(NamedPoint{journal[i].op, name, earlier});
  }
  return points;
}

}  // namespace

FailurePointReport RunEveryFailurePoint(const DurableOperation& operation) {
  FailurePointReport report;
  auto fail = [&](const std::string& where, const std::string& what) {
    ++report.failures;
    report.messages.push_back(operation.name + ", " + where + ": " + what);
  };

  std::vector<NamedPoint> points;
  {
    storage::MemFileSystem mem;
    FaultInjectionFileSystem fs(&mem);
    Status prepared = operation.prepare(fs);
    if (!prepared.ok()) {
      fail("prepare", prepared.ToString());
      return report;
    }
    fs.ClearJournal();
    Status ran = operation.run(fs);
    if (!ran.ok()) {
      fail("the run without faults", ran.ToString());
      return report;
    }
    points = NamePoints(fs.journal());
  }
  report.points = static_cast<int>(points.size());

  for (size_t p = 0; p < points.size(); ++p) {
    const NamedPoint& point = points[p];
    for (const Fault& fault : FaultsFor(point.op)) {
      ++report.trials;
      const std::string where = "point " + std::to_string(p) + " (" +
                                storage::FaultOpName(point.op) + " #" + std::to_string(point.skip) +
                                " of " + point.path + ", " + fault.name + ")";
      storage::MemFileSystem mem;
      FaultInjectionFileSystem fs(&mem, /*seed=*/p * 31 + static_cast<uint64_t>(fault.kind));
      if (Status prepared = operation.prepare(fs); !prepared.ok()) {
        fail(where, "prepare: " + prepared.ToString());
        continue;
      }
      fs.AddRule(FaultRule{point.op, fault.kind, fault.error, point.path, point.skip, 1, 0});
      Status ran = operation.run(fs);
      if (fs.faults_fired() == 0) {
        ++report.not_reached;
        continue;
      }
      if (ran.ok()) {
        fail(where, "the operation returned OK although the call failed");
      } else if (ran.message().find(operation.file) == std::string::npos) {
        fail(where, "the error does not name " + operation.file + ": " + ran.ToString());
      }
      // Restart: what was never synced is lost (torn for a torn write), rules are gone.
      if (Status rebooted = fs.DropUnsyncedData(fault.kind == FaultKind::kTornWrite);
          !rebooted.ok()) {
        fail(where, "reboot: " + rebooted.ToString());
        continue;
      }
      fs.ClearRules();
      Result<DurableState> state = operation.verify(fs);
      if (!state.ok()) {
        fail(where, "after the restart: " + state.status().ToString());
        continue;
      }
      if (*state == DurableState::kNew) ++report.recovered_new;
      if (Status again = operation.run(fs); !again.ok()) {
        fail(where, "the next run after the restart: " + again.ToString());
        continue;
      }
      Result<DurableState> after = operation.verify(fs);
      if (!after.ok() || *after != DurableState::kNew) {
        fail(where, "after the next run: " + (after.ok() ? std::string("still the previous state")
                                                         : after.status().ToString()));
      }
    }
  }
  return report;
}

}  // namespace sy::reliability
