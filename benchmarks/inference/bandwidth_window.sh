#!/usr/bin/env bash
# The machine's bandwidth and the decode's, side by side in one window (issue 18): ROUNDS rounds of
# STREAM 5.10 when its source is given, read_streams.c (what a read-only workload reaches with 1 to
# 8 streams per thread), and `switchyard bench decode` of each MODEL, which measures a read pass
# and a copy pass of its own around the decode (runtime/cpu/memory_bandwidth.h).
#
#   STREAM_C=/path/to/stream.c benchmarks/inference/bandwidth_window.sh MODEL...
#
# STREAM is not in this repository: McCalpin's stream.c (www.cs.virginia.edu/stream, or
# github.com/jeffhammond/STREAM); without STREAM_C only the decodes run. Environment:
# SWITCHYARD (default build/switchyard), ROUNDS (3), THREADS (nproc), GEN_LEN (128).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -gt 0 ]] || { echo "usage: $0 MODEL..." >&2; exit 2; }
switchyard=${SWITCHYARD:-build/switchyard}
rounds=${ROUNDS:-3}
threads=${THREADS:-$(nproc)}
gen_len=${GEN_LEN:-128}
[[ -x $switchyard ]] || { echo "error: $switchyard is not built (scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ -n ${STREAM_C:-} ]]; then
  # 3 arrays of 610 MiB: far past any last-level cache; best of 19 passes (STREAM's rule).
  gcc -O3 -march=native -fopenmp -DSTREAM_ARRAY_SIZE=80000000 -DNTIMES=20 -mcmodel=medium \
    "$STREAM_C" -o "$work/stream"
fi
gcc -O2 -march=native -fopenmp benchmarks/inference/read_streams.c -o "$work/read_streams"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), threads $threads"
for ((i = 1; i <= rounds; ++i)); do
  echo "== round $i $(date -u +%T) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
  if [[ -x $work/stream ]]; then
    OMP_NUM_THREADS=$threads "$work/stream" | grep -E '^(Copy|Scale|Add|Triad)' |
      awk '{printf "STREAM %s %s MB/s  ", $1, $2} END {print ""}'
  fi
  OMP_NUM_THREADS=$threads "$work/read_streams" 5
  for model in "$@"; do
    "$switchyard" bench decode --model "$model" --prompt-len 32 --gen-len "$gen_len" --warmup 4 \
      --threads "$threads" --stream-mib 1024 2>&1 |
      grep -E '^(decode:|achieved|stream|ratio|hypervisor|thread pool)' | sed "s|^|$(basename "$model"): |"
  done
done
