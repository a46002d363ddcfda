#!/usr/bin/env bash
# Training a model whose expert states exceed this machine's RAM (issue 15, "Bigger than RAM"): one
# process on cpu with expert_store.dir set, so the experts' master, m and v (12 B per parameter)
# live only in the store file and memory holds the cache, the dense model and the working set of
# the experts a step activates (launcher/training/expert_working_set.h). Trains STEPS steps under
# /usr/bin/time -v and prints a Markdown report: tokens/s, the peak RSS against the bound
# (cache budget + dense model + 2 GiB), the store's hit rate, MB/s and traffic, and (TRACE=1) the
# hit rate of MoESys LFU against Belady on the run's own access trace (`switchyard bench cache`).
#
#   benchmarks/train/run_bigger_than_ram.sh [OUTPUT.md] [-- --set KEY=VALUE ...]
#
# Default model: 2 MoE layers x 1024 experts of hidden 512 x width 800 = 2.52 B expert parameters,
# 30.2 GB of states on the store; batch 2 x 16 tokens, top-1, so a step activates at most 32 experts
# per layer (0.63 GB of working set). Environment: SWITCHYARD (default build/switchyard), STORE_DIR
# (default a fresh directory under /var/tmp; it needs ~31 GB free, checked first, and is deleted
# at the end), CACHE_MIB (default 1024), STEPS (default 5), THREADS (default nproc), FS
# (expert_store.filesystem, default uring), SPARSE_ADAM (default false: exact, which replays every
# expert's skipped updates at the end of the run: a full read and write of the store), TRACE
# (default 1), FIO (1: fio random reads and writes of one extent on the store's disk).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=/dev/stdout
if [[ $# -gt 0 && $1 != -- ]]; then out=$1; shift; fi
[[ ${1:-} == -- ]] && shift
extra=("$@")
switchyard=${SWITCHYARD:-build/switchyard}
steps=${STEPS:-5}
threads=${THREADS:-$(nproc)}
cache_mib=${CACHE_MIB:-1024}
fs=${FS:-uring}
sparse=${SPARSE_ADAM:-false}
[[ -x $switchyard ]] || { echo "error: $switchyard is not built (scripts/build.sh)" >&2; exit 1; }
store_root=${STORE_DIR:-$(mktemp -d /var/tmp/sy-bigger-than-ram.XXXXXX)}
work=$(mktemp -d)
# The store (and the directory when this script made it) goes, whatever happens.
trap 'rm -rf "$work" "$store_root/store" "$store_root/fio"; [[ -n ${STORE_DIR:-} ]] || rmdir "$store_root"' EXIT

config=examples/configs/store.json
sets=(--set model.hidden_size=512 --set model.num_heads=8 --set model.num_layers=2
      --set model.num_experts=1024 --set model.top_k=1 --set model.moe_intermediate_size=800
      --set data.seq_len=16 --set data.batch_size=2 "${extra[@]}")
read -r extent experts expert_params tokens <<<"$(/usr/bin/python3 - "$config" "${sets[@]}" <<'PY'
import json, math, sys
cfg = json.load(open(sys.argv[1]))
args = sys.argv[2:]
sets = dict(args[i + 1].split("=", 1) for i in range(0, len(args), 2))
get = lambda block, k: int(sets.get(block + "." + k, cfg[block][k]))
h, i = get("model", "hidden_size"), get("model", "moe_intermediate_size")
experts = get("model", "num_layers") * get("model", "num_experts")
extent = math.ceil((3 * h * i * 12 + 16) / 4096) * 4096
print(extent, experts, experts * 3 * h * i, get("data", "batch_size") * get("data", "seq_len"))
PY
)"
store_bytes=$((extent * experts))
ram=$(($(awk '/MemTotal/{print $2}' /proc/meminfo) * 1024))
free_bytes=$(df --output=avail -B1 "$store_root" | tail -1)
if ((store_bytes + (2 << 30) > free_bytes)); then
  echo "error: the store needs $((store_bytes >> 20)) MiB and $store_root has $((free_bytes >> 20)) MiB free" >&2
  exit 1
fi
((store_bytes > ram)) || echo "warning: the expert states ($((store_bytes >> 20)) MiB) fit in RAM" >&2

trace=()
[[ ${TRACE:-1} == 1 ]] && trace=(--set log.routing_trace="$work/trace.txt"
                                 --set log.routing_trace_tokens=1000000)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
/usr/bin/time -v -o "$work/time.txt" "$switchyard" train --config "$config" "${sets[@]}" \
  --set train.steps="$steps" --set train.threads="$threads" --set train.eval_every=0 \
  --set train.eval_batches=1 --set checkpoint.dir= --set log.metrics="$work/metrics.jsonl" \
  --set log.every=1 --set log.progress=none \
  --set "expert_store.dir=\"$store_root/store\"" --set "expert_store.filesystem=$fs" \
  --set "expert_store.cache_mib=$cache_mib" --set "expert_store.sparse_adam=$sparse" \
  "${trace[@]}" >"$work/train.txt" 2>&1 || { cat "$work/train.txt" "$work/time.txt" >&2; exit 1; }
wall=$(($(date +%s) - start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
store_file_bytes=$(du -cb "$store_root"/store/*.store | tail -1 | cut -f1)
rm -rf "$store_root/store"

cache_line=""
if [[ ${TRACE:-1} == 1 ]]; then
  benchmarks/train/store_trace.py "$work/trace.txt" "$tokens" "$work/store-trace.txt"
  slots=$(/usr/bin/python3 -c "print(int($cache_mib * 2**20 // $extent))")
  "$switchyard" bench cache --trace "$work/store-trace.txt" \
    --fractions "$(/usr/bin/python3 -c "print(round($slots / $experts, 6))")" --warmup 0 \
    >"$work/cache.txt"
  cache_line=$(cat "$work/cache.txt")
fi
fio_line=""
if [[ ${FIO:-0} == 1 ]]; then
  read -r r w <<<"$(benchmarks/train/fio_extent.sh "$store_root" "$extent" 2G 15)"
  fio_line="fio on the same disk (io_uring, O_DIRECT, bs = one extent, iodepth 4): randread $r MB/s, randwrite $w MB/s"
fi

/usr/bin/python3 - "$work" "$extent" "$experts" "$expert_params" "$cache_mib" "$store_file_bytes" \
  "$wall" <<PY >"$out"
import json, re, statistics, sys
work, extent, experts, expert_params = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cache_mib, store_file, wall = float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
time_txt = open(f"{work}/time.txt").read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_txt).group(1)) * 1024
train = open(f"{work}/train.txt").read()
params = re.search(r"(\d+) parameters \((\d+) in experts\)", train)
total_params, exp_params = (int(params.group(1)), int(params.group(2))) if params else (0, expert_params)
dense = (total_params - exp_params) * 16  # value, gradient, AdamW m and v
bound = cache_mib * 2**20 + dense + 2 * 2**30
rows = [json.loads(l) for l in open(f"{work}/metrics.jsonl") if '"step_seconds"' in l]
st = [r["expert_store"] for r in rows]
hits = sum(s["hits"] for s in st); acc = hits + sum(s["misses"] for s in st)
rb = sum(s["bytes_read"] for s in st); wb = sum(s["bytes_written"] for s in st)
rs = sum(s["read_seconds"] for s in st)
step_s = sum(r["step_seconds"] for r in rows)
tokens = sum(r["tokens_per_s"] * r["step_seconds"] for r in rows)
print("## Bigger than RAM: training on the expert store (run_bigger_than_ram.sh)\n")
print("\`\`\`")
print("date:     $(date -u '+%Y-%m-%d %H:%M UTC')")
print("cpu:      $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores (threads used: $threads)")
print("memory:   %.1f GiB RAM; store on $(df --output=source,fstype "$store_root" | tail -1) (expert_store.filesystem=$fs)" % ($ram / 2**30))
print("load:     $load_before before, $load_after after (uptime load averages)")
print("command:  benchmarks/train/run_bigger_than_ram.sh (config examples/configs/store.json ${sets[*]},")
print("          $steps steps, cache_mib $cache_mib, sparse_adam $sparse)")
print("model:    %d parameters, %d in %d experts; expert states %.1f GB on the store (file %.1f GB)"
      % (total_params, exp_params, experts, experts * extent / 1e9, store_file / 1e9))
print("\`\`\`\n")
print("| figure | value |")
print("| --- | ---: |")
print("| expert states / RAM | %.1f GB / %.1f GB (%.2fx) |" % (experts * extent / 1e9, $ram / 1e9, experts * extent / $ram))
print("| peak RSS (/usr/bin/time -v) | %.2f GiB |" % (rss / 2**30))
print("| bound: cache %.0f MiB + dense model %.0f MiB + 2 GiB | %.2f GiB (%s) |" % (
    cache_mib, dense / 2**20, bound / 2**30, "**held**" if rss <= bound else "**exceeded**"))
print("| steps | %d, %.1f s in all (wall of the whole run %d s, with creating the store and the end) |" % (len(rows), step_s, wall))
print("| tokens/s (training steps) | %.1f |" % (tokens / step_s))
print("| median step | %.1f s |" % statistics.median(r["step_seconds"] for r in rows))
print("| working set at a step's end (median) | %.0f MiB |" % (statistics.median(s.get("working_set_bytes", 0) for s in st) / 2**20))
print("| cache hit rate (steps) | %.1f%% (%d hits, %d misses) |" % (100 * hits / max(acc, 1), hits, acc - hits))
print("| store read during steps | %.0f MB, %.0f MB/s of wall time with a read in flight |" % (rb / 1e6, rb / rs / 1e6 if rs > 0 else 0))
print("| store written during steps | %.0f MB |" % (wb / 1e6))
print("| prefetch hidden fraction | %.2f |" % ((sum(s["read_seconds"] * s["hidden_fraction"] for s in st) / rs) if rs > 0 else 1.0))
print()
for line in train.splitlines():
    if line.startswith("final step"):
        print("Run: \`%s\`\n" % line)
PY
if [[ -n $cache_line ]]; then
  { echo "Cache policies on this run's per-step access trace (\`switchyard bench cache\`, cache = the run's slots):"
    echo; echo '```'; echo "$cache_line"; echo '```'; } >>"$out"
fi
[[ -n $fio_line ]] && echo "$fio_line" >>"$out"
exit 0
