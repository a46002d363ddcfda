#!/usr/bin/env bash
# Two switchyard binaries side by side on the decode-bench model: `bench decode` alternated
# A, B, A, B ... for ROUNDS rounds in one sitting, so that the machine's load and the page cache
# affect both alike. Prints every round and the median of the per-round ratios B/A (tokens/s), as
# Markdown, with the same ratio taken on the median decode step. Use it for a before/after
# comparison of a change:
#
#   benchmarks/inference/compare_decode.sh OLD_BINARY NEW_BINARY [OUTPUT.md]
#
# Environment: MODEL_DIR (default ${BUILD_DIR:-build}/decode_bench_model, written once by
# write_decode_bench_model.py), MODEL (a GGUF file or model directory to run instead, e.g.
# llama.cpp's Q4_0 file of vs_llamacpp.sh; MODEL_DIR is then not written), THREADS (default nproc), ROUNDS (default 5), PROMPT_LEN (default
# 32), GEN_LEN (default 64), WARMUP (default 4). Both binaries must take the same `bench decode`
# flags (--threads included).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_BINARY NEW_BINARY [OUTPUT.md]" >&2; exit 2; }
a=$1 b=$2 out=${3:-/dev/stdout}
for bin in "$a" "$b"; do
  [[ -x $bin ]] || { echo "error: $bin is not an executable" >&2; exit 1; }
done
model=${MODEL:-${MODEL_DIR:-${BUILD_DIR:-build}/decode_bench_model}}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-5}
[[ -n ${MODEL:-} ]] || /usr/bin/python3 benchmarks/inference/write_decode_bench_model.py "$model" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # run BINARY JSON
  "$1" bench decode --model "$model" --prompt-len "${PROMPT_LEN:-32}" --gen-len "${GEN_LEN:-64}" \
    --warmup "${WARMUP:-4}" --threads "$threads" --dtype bf16 --stream-mib 256 --json-out "$2" \
    >"$2.txt" 2>"$2.err" || { cat "$2.err" >&2; exit 1; }
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$rounds"); do
  run "$a" "$work/a$i.json"
  run "$b" "$work/b$i.json"
  echo "round $i/$rounds done" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$work" "$rounds" "$a" "$b" "$threads" "$load_before" "$load_after" >"$out" <<'PY'
import json, statistics, sys, platform, subprocess
work, rounds, a, b, threads, lb, la = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
load = lambda p: json.load(open(p))
rows = [(load(f"{work}/a{i}.json"), load(f"{work}/b{i}.json")) for i in range(1, rounds + 1)]
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                     text=True).stdout.strip()
print("| round | A tokens/s | B tokens/s | B/A | A median step ms | B median step ms | B/A by median step |")
print("| --- | --- | --- | --- | --- | --- | --- |")
ratios, step_ratios = [], []
for i, (ra, rb) in enumerate(rows, 1):
    ta, tb = ra["tokens_per_s"], rb["tokens_per_s"]
    sa, sb = ra["median_step_ms"], rb["median_step_ms"]
    ratios.append(tb / ta)
    step_ratios.append(sa / sb)
    print(f"| {i} | {ta:.1f} | {tb:.1f} | {tb / ta:.3f} | {sa:.2f} | {sb:.2f} | {sa / sb:.3f} |")
ma = statistics.median(r[0]["tokens_per_s"] for r in rows)
mb = statistics.median(r[1]["tokens_per_s"] for r in rows)
print(f"\nmedian tokens/s: A {ma:.1f}, B {mb:.1f}; median of the per-round ratios B/A: "
      f"**{statistics.median(ratios):.3f}** (min {min(ratios):.3f}, max {max(ratios):.3f}); "
      f"by the median step (steadier on a shared machine): **{statistics.median(step_ratios):.3f}**\n")
print(f"A: `{a}`, B: `{b}`; {rounds} rounds alternated A, B; threads {threads}; "
      f"cpu {cpu}; load {lb} before, {la} after")
PY
