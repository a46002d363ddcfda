#!/usr/bin/env bash
# Where a decode step's time goes (issue 18): `switchyard bench decode` on the decode-bench model
# (bf16, or MODEL: e.g. llama.cpp's Q4_0 GGUF of it), 2 threads, 400 decode steps, recorded by
# `perf record --call-graph dwarf` once its decode steps have started (the load and the prefill
# are left out), then bucketed by op kind by decode_breakdown.py.
#
#   benchmarks/inference/profile_decode.sh BINARY OUT_PREFIX
#
# Writes OUT_PREFIX.txt (the bench's report), OUT_PREFIX.env (the load average and the process's
# Rss / AnonHugePages when perf attached), OUT_PREFIX.stat (perf stat of the same window:
# task-clock, context switches), OUT_PREFIX.data and OUT_PREFIX.md (the table). Environment:
# MODEL_DIR (default build/decode_bench_model, written if missing), MODEL (a GGUF file or model
# directory to run instead; MODEL_DIR is then not written), THREADS (2), RECORD_SECONDS (8),
# FREQ (499 Hz), GEN_LEN (400 decode steps; the decode must outlast RECORD_SECONDS, which a fast
# model at 400 steps may not: the script then says so and stops).
# perf samples on-CPU time: on a loaded machine compare the shares, not the microseconds.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $# -eq 2 ]] || { echo "usage: $0 BINARY OUT_PREFIX" >&2; exit 2; }
bin=$1 out=$2
model=${MODEL:-${MODEL_DIR:-build/decode_bench_model}}
secs=${RECORD_SECONDS:-8} freq=${FREQ:-499}
[[ -n ${MODEL:-} ]] || /usr/bin/python3 benchmarks/inference/write_decode_bench_model.py "$model" >&2
"$bin" bench decode --model "$model" --dtype bf16 --prompt-len 32 --gen-len "${GEN_LEN:-400}" --warmup 4 \
  --threads "${THREADS:-2}" --stream-mib 64 >"$out.txt" 2>"$out.err" &
pid=$!
until grep -q "decode steps" "$out.err" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || { cat "$out.err" >&2; exit 1; }
  sleep 0.2
done
echo "load at attach: $(cat /proc/loadavg)" >"$out.env"
grep -E "AnonHugePages|^Rss" "/proc/$pid/smaps_rollup" >>"$out.env" || true
perf stat -e task-clock,context-switches,cpu-migrations -p "$pid" -o "$out.stat" -- sleep "$secs" &
# perf ends its `sleep` early (and fails) when the decode ends inside the window.
if ! perf record --call-graph dwarf,16384 -F "$freq" -p "$pid" -o "$out.data" -- sleep "$secs" \
  2>/dev/null; then
  echo "error: the decode ended inside the ${secs} s recording window, so the per-step figures" \
    "would be wrong: lower RECORD_SECONDS or raise GEN_LEN" >&2
  exit 1
fi
wait
step_ms=$(grep -o "median step [0-9.]*" "$out.txt" | awk '{print $3}')
/usr/bin/python3 benchmarks/inference/decode_breakdown.py "$out.data" "$step_ms" "$secs" "$freq" \
  >"$out.md"
cat "$out.md"
