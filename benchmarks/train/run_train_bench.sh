#!/usr/bin/env bash
# One training step (forward, backward, AdamW) of Switchyard beside PyTorch eager on the same model,
# batch and thread count, in one run; prints a Markdown report with the machine it ran on.
#
#   benchmarks/train/run_train_bench.sh [CONFIG] [OUTPUT.md]
#
# CONFIG defaults to examples/configs/small.json (model.vocab_size must be set). Environment:
# SWITCHYARD (default build/switchyard), THREADS (default: nproc), STEPS (timed steps, default 8),
# WARMUP (default 2). PyTorch is Debian's python3-torch (/usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
config=${1:-examples/configs/small.json}
out=${2:-/dev/stdout}
switchyard=${SWITCHYARD:-build/switchyard}
threads=${THREADS:-$(nproc)}
steps=${STEPS:-8}
warmup=${WARMUP:-2}
[[ -x $switchyard ]] || { echo "error: $switchyard is not built (scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$switchyard" train --config "$config" --set train.steps=$((warmup + steps)) \
  --set train.threads="$threads" --set train.eval_every=0 --set train.eval_batches=1 \
  --set checkpoint.dir= --set log.metrics="$work/m.jsonl" --set log.every=1 \
  --set log.progress=none >"$work/sy.txt"
/usr/bin/python3 - "$work/m.jsonl" "$warmup" >"$work/sy.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"phase_seconds"' in l]
rows = [r for r in rows if r["step"] > int(sys.argv[2])]
med = lambda k: statistics.median(r["phase_seconds"][k] for r in rows)
step = statistics.median(r["step_seconds"] for r in rows)
print(json.dumps({"step_seconds": step,
                  "phase_seconds": {k: med(k) for k in ("data", "forward", "backward", "optimizer")}}))
PY
/usr/bin/python3 benchmarks/train/torch_train_step.py "$config" --threads "$threads" \
  --steps "$steps" --warmup "$warmup" >"$work/torch.json"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$config" "$work/sy.json" "$work/torch.json" "$work/sy.txt" <<PY >"$out"
import json, sys
cfg = json.load(open(sys.argv[1]))
sy, pt = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
first = open(sys.argv[4]).readline().strip()
tokens = cfg["data"]["batch_size"] * cfg["data"]["seq_len"]
sy_tps, pt_tps = tokens / sy["step_seconds"], pt["tokens_per_s"]
print("## Training step: Switchyard vs PyTorch eager\n")
print("\`\`\`")
print("date:     $(date -u '+%Y-%m-%d %H:%M UTC')")
print("cpu:      $(lscpu | sed -n 's/^Model name: *//p')")
print("cores:    $(nproc) (threads used: $threads)")
print("memory:   $(free -g | awk '/Mem:/{print $2}') GiB")
print("kernel:   $(uname -r)")
print("load:     $load_before before, $load_after after")
print("config:   $config (" + first + ")")
print("batch:    %d x %d tokens; median of $steps steps after $warmup warmup" % (cfg["data"]["batch_size"], cfg["data"]["seq_len"]))
print("pytorch:  " + pt["torch"] + " eager, float32, AdamW foreach")
print("\`\`\`\n")
print("| | Switchyard | PyTorch eager | ratio (Switchyard / PyTorch) |")
print("| --- | --- | --- | --- |")
print("| tokens/s | %.0f | %.0f | **%.2fx** |" % (sy_tps, pt_tps, sy_tps / pt_tps))
print("| step (s) | %.3f | %.3f | |" % (sy["step_seconds"], pt["step_seconds"]))
for k in ("forward", "backward", "optimizer"):
    print("| %s (s) | %.3f | %.3f | %.2fx faster |" % (k, sy["phase_seconds"][k], pt["phase_seconds"][k],
          pt["phase_seconds"][k] / max(sy["phase_seconds"][k], 1e-9)))
print("| data (s) | %.4f | (random ids) | |" % sy["phase_seconds"]["data"])
PY
