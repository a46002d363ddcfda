#!/usr/bin/env bash
# Quantized experts on the decode-bench model: `bench decode` with the experts in bf16, q8_0 and
# q4_0 (attention and the rest bf16: --quantize experts --quant-type T), alternated bf16, q8_0,
# q4_0, bf16, ... for ROUNDS rounds in one sitting; then `switchyard perplexity` of each quantized
# variant against the bf16 model (top-1 agreement, KL divergence, perplexity) on a seeded random
# token file. Prints Markdown: every round, the medians and the per-round ratios to bf16.
#
#   benchmarks/inference/compare_quant_decode.sh [SWITCHYARD] [OUTPUT.md]
#
# Environment: MODEL_DIR (default ${BUILD_DIR:-build}/decode_bench_model, written once by
# write_decode_bench_model.py), THREADS (default nproc), ROUNDS (default 3), PROMPT_LEN (default
# 32), GEN_LEN (default 64), WARMUP (default 4), PPL_TOKENS (default 1024), PPL_CONTEXT (default
# 128).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-${BUILD_DIR:-build}/switchyard}
out=${2:-/dev/stdout}
[[ -x $bin ]] || { echo "error: $bin is not an executable" >&2; exit 1; }
model=${MODEL_DIR:-${BUILD_DIR:-build}/decode_bench_model}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-3}
/usr/bin/python3 benchmarks/inference/write_decode_bench_model.py "$model" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
variants=(bf16 q8_0 q4_0)

flags() {  # flags VARIANT: the experts' dtype
  [[ $1 == bf16 ]] || echo "--quantize experts --quant-type $1"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2046
    "$bin" bench decode --model "$model" --prompt-len "${PROMPT_LEN:-32}" \
      --gen-len "${GEN_LEN:-64}" --warmup "${WARMUP:-4}" --threads "$threads" --dtype bf16 \
      $(flags "$v") --stream-mib 256 --json-out "$work/$v.$i.json" >"$work/$v.$i.txt" \
      2>"$work/$v.$i.err" || { cat "$work/$v.$i.err" >&2; exit 1; }
  done
  echo "round $i/$rounds done" >&2
done
load_mid=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$work/ids.txt" "${PPL_TOKENS:-1024}" <<'PY'
import random, sys
random.seed(0)
open(sys.argv[1], "w").write(" ".join(str(random.randrange(256)) for _ in range(int(sys.argv[2]))))
PY
for v in q8_0 q4_0; do
  # shellcheck disable=SC2046
  "$bin" perplexity --model "$model" --dtype bf16 $(flags "$v") --reference "$model" \
    --reference-dtype bf16 --ids "$work/ids.txt" --context "${PPL_CONTEXT:-128}" \
    --threads "$threads" --json >"$work/ppl.$v.json" 2>"$work/ppl.$v.err" ||
    { cat "$work/ppl.$v.err" >&2; exit 1; }
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$work" "$rounds" "$bin" "$threads" "$load_before" "$load_mid" \
  "$load_after" >"$out" <<'PY'
import json, statistics, subprocess, sys
work, rounds, binary, threads, lb, lm, la = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
variants = ["bf16", "q8_0", "q4_0"]
runs = {v: [json.load(open(f"{work}/{v}.{i}.json")) for i in range(1, rounds + 1)]
        for v in variants}
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True,
                     text=True).stdout.strip()
print("| round | " + " | ".join(f"{v} tokens/s" for v in variants) +
      " | q8_0/bf16 | q4_0/bf16 |")
print("| --- " * (len(variants) + 3) + "|")
ratios = {v: [] for v in variants[1:]}
for i in range(rounds):
    t = {v: runs[v][i]["tokens_per_s"] for v in variants}
    for v in variants[1:]:
        ratios[v].append(t[v] / t["bf16"])
    print(f"| {i + 1} | " + " | ".join(f"{t[v]:.1f}" for v in variants) + " | " +
          " | ".join(f"{t[v] / t['bf16']:.3f}" for v in variants[1:]) + " |")
print()
print("| experts | median tokens/s | median step ms | weight MiB/token | median ratio to bf16 |")
print("| --- | --- | --- | --- | --- |")
for v in variants:
    r = runs[v]
    mib = statistics.median(x["weight_bytes_per_token"] for x in r) / 2**20
    ratio = "1" if v == "bf16" else f"**{statistics.median(ratios[v]):.3f}**"
    print(f"| {v} | {statistics.median(x['tokens_per_s'] for x in r):.1f} | "
          f"{statistics.median(x['median_step_ms'] for x in r):.2f} | {mib:.1f} | {ratio} |")
print()
print("| experts | top-1 agreement with bf16 | mean KL (nats) | perplexity | bf16 perplexity |")
print("| --- | --- | --- | --- | --- |")
for v in variants[1:]:
    p = json.load(open(f"{work}/ppl.{v}.json"))
    print(f"| {v} | {p.get('top1_agreement', float('nan')):.4f} | "
          f"{p.get('mean_kl', float('nan')):.3g} | {p.get('perplexity', float('nan')):.3f} | "
          f"{p.get('reference_perplexity', float('nan')):.3f} |")
print()
print(f"`{binary}`; {rounds} rounds alternated bf16, q8_0, q4_0; threads {threads}; cpu {cpu}; "
      f"load {lb} before, {lm} after the decode runs, {la} after the perplexity runs")
PY
