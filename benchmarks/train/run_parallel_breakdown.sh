#!/usr/bin/env bash
# Per-step time breakdown of distributed training (MoESys Fig. 10 style): forward, backward and
# optimizer compute, and communication, at 1, 2 and 4 ranks on examples/configs/ep4.json with
# ep_size = ranks, and at 4 ranks with ZeRO-3 (the same global batch of 16 x 16 tokens throughout).
#
#   benchmarks/train/run_parallel_breakdown.sh BUILD_DIR [STEPS]
#
# Prints a markdown table of the median per-step seconds over steps 6..STEPS (default 40).
# Each rank computes with 1 thread. On a machine with fewer cores than ranks the ranks are
# oversubscribed (mpirun --oversubscribe), which the table's caller must say.
set -euo pipefail
build=$1
steps=${2:-40}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/sy_par_bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
for run in 1:0 2:0 4:0 4:3; do
  np=${run%:*} zero=${run#*:}
  args=(train --config "$root/examples/configs/ep4.json" --set train.steps="$steps"
        --set train.eval_every=0 --set train.eval_batches=1 --set log.every=1
        --set log.progress=none --set parallel.ep_size="$np" --set parallel.zero_stage="$zero"
        --set log.metrics="$dir/np$np-z$zero.jsonl")
  if [[ $np == 1 ]]; then
    "$build/switchyard" "${args[@]}" >/dev/null
  else
    "${mpirun_cmd[@]}" -np "$np" "$build/switchyard" "${args[@]}" >/dev/null
  fi
done
/usr/bin/python3 - "$dir" "$steps" <<'PY'
import json, statistics, sys
d, steps = sys.argv[1], int(sys.argv[2])
phases = ("data", "forward", "backward", "optimizer", "communication")
print("| ranks (EP, ZeRO) | step (s) | " + " | ".join(f"{p} (s)" for p in phases) + " | comm share | tokens/s |")
print("|---" * (len(phases) + 4) + "|")
for np, zero in ((1, 0), (2, 0), (4, 0), (4, 3)):
    rows = [json.loads(l) for l in open(f"{d}/np{np}-z{zero}.jsonl")]
    rows = [r for r in rows if "phase_seconds" in r and r["step"] > 5]
    med = lambda f: statistics.median(f(r) for r in rows)
    step = med(lambda r: r["step_seconds"])
    ph = {p: med(lambda r, p=p: r["phase_seconds"][p]) for p in phases}
    tok = med(lambda r: 256 / r["step_seconds"])
    print(f"| {np} ({np}, {zero}) | {step:.4f} | " + " | ".join(f"{ph[p]:.4f}" for p in phases) +
          f" | {ph['communication'] / step:.0%} | {tok:.0f} |")
PY
