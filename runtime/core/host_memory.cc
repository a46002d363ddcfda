#include "runtime/core/host_memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

namespace sy {
namespace {

// The value of `key` ("MemAvailable:") in /proc/meminfo, in bytes, or -1.
double MemInfo(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  double kib = 0;
  std::string unit;
  while (in >> name >> kib) {
    std::getline(in, unit);
    if (name == key) return kib * 1024;
  }
  return -1;
}

// What the cgroup (v2, then v1) still allows, or -1 when it sets no limit.
double CgroupRoom() {
  for (const auto& [limit_path, usage_path] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        std::pair{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    std::ifstream limit_in(limit_path), usage_in(usage_path);
    std::string limit_text;
    double usage = 0;
    if (!(limit_in >> limit_text) || !(usage_in >> usage)) continue;
    if (limit_text == "max") return -1;
    const double limit = std::strtod(limit_text.c_str(), nullptr);
    if (limit <= 0 || limit >= 1e18) return -1;  // v1 writes a huge number for "no limit"
    return std::max(0.0, limit - usage);
  }
  return -1;
}

}  // namespace

double TotalHostMemory() { return std::max(0.0, MemInfo("MemTotal:")); }

double AvailableHostMemory() {
  double available = MemInfo("MemAvailable:");
  if (available < 0) return 0;
  const double cgroup = CgroupRoom();
  if (cgroup >= 0) available = std::min(available, cgroup);
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    const int ranks = std::atoi(local);
    if (ranks > 1) available /= ranks;
  }
  return available;
}

std::string FormatMemory(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char text[48];
  std::snprintf(text, sizeof(text), u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

}  // namespace sy
