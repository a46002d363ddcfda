#!/usr/bin/env bash
# Flat vs hierarchical all-to-all with 4 ranks as 2 emulated nodes x 2 ranks, 4 KiB to 16 MiB per
# peer, printed with the machine it ran on (paste into benchmarks/parallel-results.md).
#
#   benchmarks/parallel/run_all_to_all.sh [build-dir] [extra sy_all_to_all_bench flags]
#
# The build dir must have been configured with -DSY_BUILD_BENCHMARKS=ON and built with
# `ninja -C <build-dir> sy_all_to_all_bench`. NP (default 4) and RANKS_PER_NODE (default 2)
# override the job shape.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
shift || true
bench="$build/benchmarks/parallel/sy_all_to_all_bench"
if [[ ! -x "$bench" ]]; then
  echo "missing $bench: configure with -DSY_BUILD_BENCHMARKS=ON and build sy_all_to_all_bench" >&2
  exit 1
fi
np=${NP:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "## $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo
echo '```'
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\))' || true
echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
mpirun --version | head -1
echo '```'
echo
echo '```'
echo "mpirun -np $np --oversubscribe --bind-to none $bench --ranks-per-node ${RANKS_PER_NODE:-2} $*"
mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$bench" \
  --ranks-per-node "${RANKS_PER_NODE:-2}" "$@"
echo '```'
