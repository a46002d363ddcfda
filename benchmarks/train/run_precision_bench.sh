#!/usr/bin/env bash
# Training steps in f32 and bf16, Switchyard beside PyTorch eager (float32, and bf16 autocast over
# float32 parameters), on the same model, batch and thread count, alternated in one run; prints a
# Markdown report with the machine and the ratios:
#   Switchyard bf16 / Switchyard f32, Switchyard f32 / PyTorch f32, Switchyard bf16 / PyTorch bf16.
#
#   benchmarks/train/run_precision_bench.sh [CONFIG] [OUTPUT.md]
#
# CONFIG defaults to examples/configs/small.json (model.vocab_size must be set). Each round runs
# the four in an order rotated by one per round, each for WARMUP + STEPS steps; a round's figure is
# the median step of its timed steps, and the report gives the median over rounds of each ratio
# (ratios taken within a round). Environment: SWITCHYARD (default build/switchyard), PYTHON (the
# PyTorch interpreter, default /usr/bin/python3: Debian's torch 1.13; a venv with a recent torch
# for the issue's comparison), THREADS (default: nproc), ROUNDS (3), STEPS (5), WARMUP (2).
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:-examples/configs/small.json}
out=${2:-/dev/stdout}
switchyard=${SWITCHYARD:-build/switchyard}
python=${PYTHON:-/usr/bin/python3}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-3}
steps=${STEPS:-5}
warmup=${WARMUP:-2}
[[ -x $switchyard ]] || { echo "error: $switchyard is not built (scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One run of one configuration; appends {"name", "round", "step_seconds", "phases"} to runs.jsonl.
run_switchyard() {  # precision round
  "$switchyard" train --config "$config" --set train.steps=$((warmup + steps)) \
    --set train.precision="$1" --set train.threads="$threads" --set train.eval_every=0 \
    --set train.eval_batches=1 --set checkpoint.dir= --set log.metrics="$work/m.jsonl" \
    --set log.every=1 --set log.progress=none >"$work/sy.txt"
  "$python" - "$work/m.jsonl" "$warmup" "switchyard-$1" "$2" >>"$work/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"phase_seconds"' in l]
rows = [r for r in rows if r["step"] > int(sys.argv[2])]
med = lambda k: statistics.median(r["phase_seconds"][k] for r in rows)
print(json.dumps({"name": sys.argv[3], "round": int(sys.argv[4]),
                  "step_seconds": statistics.median(r["step_seconds"] for r in rows),
                  "phases": {k: med(k) for k in ("forward", "backward", "optimizer")}}))
PY
  rm -f "$work/m.jsonl"
}
run_torch() {  # precision round
  "$python" benchmarks/train/torch_train_step.py "$config" --threads "$threads" --steps "$steps" \
    --warmup "$warmup" --precision "$1" >"$work/pt.json"
  "$python" - "$work/pt.json" "pytorch-$1" "$2" >>"$work/runs.jsonl" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"name": sys.argv[2], "round": int(sys.argv[3]), "step_seconds": r["step_seconds"],
                  "phases": r["phase_seconds"], "torch": r["torch"]}))
PY
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
order=(switchyard:f32 switchyard:bf16 pytorch:f32 pytorch:bf16)
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#order[@]}; i++)); do
    item=${order[$(((i + r) % ${#order[@]}))]}
    echo "round $r: ${item}" >&2
    case $item in
      switchyard:*) run_switchyard "${item#*:}" "$r" ;;
      pytorch:*) run_torch "${item#*:}" "$r" ;;
    esac
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
first=$(head -1 "$work/sy.txt")

"$python" - "$config" "$work/runs.jsonl" <<PY >"$out"
import collections, json, statistics, sys
cfg = json.load(open(sys.argv[1]))
runs = [json.loads(l) for l in open(sys.argv[2])]
tokens = cfg["data"]["batch_size"] * cfg["data"]["seq_len"]
by = collections.defaultdict(dict)
for r in runs:
    by[r["round"]][r["name"]] = r
torch_version = next(r["torch"] for r in runs if "torch" in r)
def tps(r):
    return tokens / r["step_seconds"]
ratios = {
    "Switchyard bf16 / Switchyard f32": ("switchyard-bf16", "switchyard-f32"),
    "Switchyard f32 / PyTorch f32": ("switchyard-f32", "pytorch-f32"),
    "Switchyard bf16 / PyTorch bf16 autocast": ("switchyard-bf16", "pytorch-bf16"),
}
print("## Training step in f32 and bf16: Switchyard vs PyTorch eager\n")
print("\`\`\`")
print("date:     $(date -u '+%Y-%m-%d %H:%M UTC')")
print("cpu:      $(lscpu | sed -n 's/^Model name: *//p'), bf16 dot: $(grep -qw avx512_bf16 /proc/cpuinfo && echo avx512_bf16 || echo none)")
print("cores:    $(nproc) (threads used: $threads)")
print("memory:   $(free -g | awk '/Mem:/{print $2}') GiB")
print("load:     $load_before before, $load_after after")
print("config:   $config ($first)")
print("batch:    %d x %d tokens; $rounds rounds, order rotated, each run $warmup warm-up + $steps timed steps" % (cfg["data"]["batch_size"], cfg["data"]["seq_len"]))
print("pytorch:  %s eager, AdamW foreach; bf16 = torch.autocast(cpu, bfloat16) over f32 parameters" % torch_version)
print("command:  benchmarks/train/run_precision_bench.sh $config (PYTHON=$python)")
print("\`\`\`\n")
print("| run | tokens/s (median of rounds) | step (s) | forward (s) | backward (s) | optimizer (s) |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name in ("switchyard-f32", "switchyard-bf16", "pytorch-f32", "pytorch-bf16"):
    rs = [by[r][name] for r in sorted(by)]
    med = lambda f: statistics.median(f(r) for r in rs)
    print("| %s | %.0f | %.3f | %.3f | %.3f | %.3f |" % (name, med(tps), med(lambda r: r["step_seconds"]),
          med(lambda r: r["phases"]["forward"]), med(lambda r: r["phases"]["backward"]),
          med(lambda r: r["phases"]["optimizer"])))
print()
print("| ratio of tokens/s | median | per round |")
print("| --- | ---: | --- |")
for label, (a, b) in ratios.items():
    per = [tps(by[r][a]) / tps(by[r][b]) for r in sorted(by)]
    print("| %s | **%.2fx** | %s |" % (label, statistics.median(per), ", ".join("%.2f" % x for x in per)))
PY
