#!/usr/bin/env bash
# CPU decode at batch 1 on a Mixtral-format bf16 model whose experts are several times the
# last-level cache: tokens/s as achieved weight bandwidth, beside a STREAM-like read and copy
# measured in the same run (`switchyard bench decode`). Runs the bench RUNS times and prints a
# Markdown report (median run, every run, the machine, load average before and after, commit).
#
#   benchmarks/inference/run_decode_bench.sh [OUTPUT.md]
#
# The ratio is reported twice: total decode time against the best stream pass (STREAM's rule),
# and the median decode step against the median stream pass (steadier on a shared machine).
# NICE (default 0) runs the bench under `nice -n NICE` (negative: ahead of other jobs).
# Environment: SWITCHYARD (default build/switchyard), MODEL_DIR (default
# ${BUILD_DIR:-build}/decode_bench_model; keep it on a disk, not a tmpfs), THREADS (default
# nproc), RUNS (default 3), PROMPT_LEN (default 32), GEN_LEN (default 64), WARMUP (default 4),
# STREAM_MIB (default 1024). The model (hidden 1024, 8 experts of intermediate 2048, top-2, 12
# layers, vocab 256: 1.1 GiB of experts) is written once by write_decode_bench_model.py and kept.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/dev/stdout}
switchyard=${SWITCHYARD:-build/switchyard}
model=${MODEL_DIR:-${BUILD_DIR:-build}/decode_bench_model}
threads=${THREADS:-$(nproc)}
runs=${RUNS:-3}
prompt_len=${PROMPT_LEN:-32}
gen_len=${GEN_LEN:-64}
warmup=${WARMUP:-4}
stream_mib=${STREAM_MIB:-1024}
[[ -x $switchyard ]] || { echo "error: $switchyard is not built (scripts/build.sh)" >&2; exit 1; }
/usr/bin/python3 benchmarks/inference/write_decode_bench_model.py "$model" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$runs"); do
  nice -n "${NICE:-0}" "$switchyard" bench decode --model "$model" --prompt-len "$prompt_len" --gen-len "$gen_len" \
    --warmup "$warmup" --threads "$threads" --dtype bf16 --stream-mib "$stream_mib" \
    --json-out "$work/run$i.json" >"$work/run$i.txt" 2>"$work/run$i.err"
  cat "$work/run$i.txt" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

llc=$(lscpu | sed -n 's/^L3 cache: *//p')
/usr/bin/python3 - "$work" "$runs" <<PY >"$out"
import json, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
res = [json.load(open(f"{work}/run{i}.json")) for i in range(1, runs + 1)]
med = sorted(res, key=lambda r: r["tokens_per_s"])[(runs - 1) // 2]
mib = 2**20
print("## CPU decode at batch 1: weight bandwidth vs STREAM\n")
print("\`\`\`")
print("date:      $(date -u '+%Y-%m-%d %H:%M UTC')")
print("commit:    $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- runtime inference launcher || echo ' (+ local changes)')")
print("cpu:       $(lscpu | sed -n 's/^Model name: *//p')")
print("cores:     $(nproc) (threads used: $threads)")
print("LLC:       $llc")
print("memory:    $(free -g | awk '/Mem:/{print $2}') GiB")
print("kernel:    $(uname -r)")
print("load:      $load_before before, $load_after after (bench under nice ${NICE:-0})")
print("model:     %s (%s)" % (med["model"], med["config"]))
print("weights:   %.0f MiB bf16, experts %.0f MiB" % (med["weight_bytes_total"] / mib,
                                                    med["expert_bytes_total"] / mib))
print("decode:    prompt $prompt_len, $warmup untimed + $gen_len timed greedy steps; $runs runs")
print("stream:    %d MiB read, 2 x %d MiB copy (memcpy), 5 passes before and 5 after decode; "
      "best pass (STREAM's rule) and median pass"
      % (med["stream_read_bytes"] / mib, med["stream_copy_bytes"] / mib))
print("\`\`\`\n")
print("| run | tokens/s | weight MiB/token | achieved GB/s | stream copy GB/s | stream read GB/s "
      "| ratio to copy | ratio to read | medians: step GB/s, copy, read | median ratio to copy "
      "| to read | steal ms (steps) | steal-free steps: GB/s, ratio to copy, to read |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for i, r in enumerate(res, 1):
    mark = " (median)" if r is med else ""
    stolen = sum(1 for s in r["steps"] if s["steal_seconds"] > 0)
    print("| %d%s | %.2f | %.1f | %.2f | %.2f | %.2f | %.3f | %.3f | %.2f, %.2f, %.2f | %.3f "
          "| %.3f | %.0f (%d) | %.2f, %.3f, %.3f |" % (
              i, mark, r["tokens_per_s"], r["weight_bytes_per_token"] / mib,
              r["achieved_gb_per_s"], r["stream_copy_gb_per_s"], r["stream_read_gb_per_s"],
              r["ratio_to_stream_copy"], r["ratio_to_stream_read"], r["median_step_gb_per_s"],
              r["stream_copy_median_gb_per_s"], r["stream_read_median_gb_per_s"],
              r["median_ratio_to_stream_copy"], r["median_ratio_to_stream_read"],
              r["steal_seconds"] * 1e3, stolen, r["steal_free_gb_per_s"],
              r["steal_free_ratio_to_stream_copy"], r["steal_free_ratio_to_stream_read"]))
print()
print("Median run: **%.2f tokens/s = %.2f GB/s of weights, %.2f of stream copy (%.2f GB/s), "
      "%.2f of stream read (%.2f GB/s)**; non-expert %.1f MiB/token, KV cache %.2f MiB/token "
      "(not counted)." % (med["tokens_per_s"], med["achieved_gb_per_s"],
                          med["ratio_to_stream_copy"], med["stream_copy_gb_per_s"],
                          med["ratio_to_stream_read"], med["stream_read_gb_per_s"],
                          med["non_expert_bytes_per_token"] / mib,
                          med["kv_bytes_per_token"] / mib))
print()
print("Steal-free steps (the hypervisor took no CPU time during the step, from /proc/stat), median "
      "over runs: **%.3f of stream copy, %.3f of stream read**." % (
          statistics.median(r["steal_free_ratio_to_stream_copy"] for r in res),
          statistics.median(r["steal_free_ratio_to_stream_read"] for r in res)))
PY
