#include "runtime/cpu/weight_prefetch.h"

#include <cstdio>
#include <string>

#include "runtime/core/env.h"

namespace sy::cpu {
namespace {

WeightPrefetch ChooseWeightPrefetch() {
  const std::string forced = EnvString("SY_WEIGHT_PREFETCH", "");
  if (forced == "nta") return WeightPrefetch::kNonTemporal;
  if (forced == "t0") return WeightPrefetch::kTemporal;
  if (forced == "none") return WeightPrefetch::kNone;
  if (!forced.empty()) {
    std::fprintf(stderr,
                 "warning: SY_WEIGHT_PREFETCH=%s is not one of nta, t0, none; using the CPU's "
                 "default\n",
                 forced.c_str());
  }
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_is("amd")) return WeightPrefetch::kNonTemporal;
#endif
  return WeightPrefetch::kTemporal;
}

}  // namespace

namespace internal {
const WeightPrefetch kWeightPrefetch = ChooseWeightPrefetch();
}  // namespace internal

WeightPrefetch ChosenWeightPrefetch() { return internal::kWeightPrefetch; }

const char* WeightPrefetchName(WeightPrefetch hint) {
  switch (hint) {
    case WeightPrefetch::kNonTemporal:
      return "nta";
    case WeightPrefetch::kTemporal:
      return "t0";
    case WeightPrefetch::kNone:
      return "none";
  }
  return "none";
}

}  // namespace sy::cpu
