#!/usr/bin/env bash
# Store-backed training against in-memory training, side by side (issue 15): the same config
# trained with the expert states in memory, on the store with the sparse-axis prefetch, and on the
# store without it, alternated ROUNDS times (the order rotates every round); prints a Markdown
# report with the machine, the medians, the ratios to in-memory, the store's hit rate, traffic,
# read time and the fraction of it hidden behind compute, and the peak RSS of every run
# (/usr/bin/time -v).
#
#   benchmarks/train/run_store_bench.sh [OUTPUT.md] [-- --set KEY=VALUE ...]
#
# The config is examples/configs/store.json with the --set overrides below and the ones given
# after `--`. Environment: SWITCHYARD (default build/switchyard), STORE_DIR (where the store files
# go; default a fresh directory under /var/tmp, on the real disk), CACHE_FRACTION (the cache as a
# share of the expert states, default 0.25), ROUNDS (default 3), STEPS (timed steps per run,
# default 6), WARMUP (default 2), THREADS (default nproc), FS (expert_store.filesystem, default
# uring), FIO (1: also run fio on the store's file system with the extent as the block size),
# TRACE (1: the first store run with prefetch also records its routing over every token, which is
# the store's access pattern (each step, the experts each layer activates), and `switchyard bench
# cache` replays it: MoESys LFU, LRU, W-TinyLFU and Belady at the run's cache size),
# DEVICE (train.device, cpu or sim; default cpu), and on sim SIM_LINK_GBPS, SIM_LINK_US (its host
# <-> device link; default 3.5 GB/s and 80 us, an NVMe drive's sequential read rate and latency)
# and SIM_GFLOPS (train.sim_gflops, modelled compute on top of the real operators; default 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=/dev/stdout
if [[ $# -gt 0 && $1 != -- ]]; then out=$1; shift; fi
[[ ${1:-} == -- ]] && shift
extra=("$@")
switchyard=${SWITCHYARD:-build/switchyard}
rounds=${ROUNDS:-3}
steps=${STEPS:-6}
warmup=${WARMUP:-2}
threads=${THREADS:-$(nproc)}
fraction=${CACHE_FRACTION:-0.25}
fs=${FS:-uring}
device=${DEVICE:-cpu}
device_sets=(--set "train.device=$device")
if [[ $device == sim ]]; then
  device_sets+=(--set "train.sim_link_gbps=${SIM_LINK_GBPS:-3.5}"
                --set "train.sim_link_latency_us=${SIM_LINK_US:-80}"
                --set "train.sim_gflops=${SIM_GFLOPS:-0}")
fi
[[ -x $switchyard ]] || { echo "error: $switchyard is not built (scripts/build.sh)" >&2; exit 1; }
work=$(mktemp -d)
if [ -n "${STORE_DIR:-}" ]; then
  store_root=$STORE_DIR
  trap 'rm -rf "$work" "$store_root"/bench-*' EXIT
else
  store_root=$(mktemp -d /var/tmp/sy-store-bench.XXXXXX)
  trap 'rm -rf "$work" "$store_root"' EXIT
fi

config=examples/configs/store.json
model=(--set model.hidden_size=256 --set model.num_layers=4 --set model.num_experts=16
       --set model.moe_intermediate_size=512 --set model.num_heads=4 --set data.seq_len=64
       --set data.batch_size=16)
sets=("${model[@]}" "${device_sets[@]}" "${extra[@]}")
# One expert's state on the store: master, m, v and 16 bytes of counts, in 4 KiB pages.
read -r extent experts <<<"$(/usr/bin/python3 - "$config" "${sets[@]}" <<'PY'
import json, math, sys
cfg = json.load(open(sys.argv[1]))
sets = {}
args = sys.argv[2:]
for i in range(0, len(args), 2):
    k, v = args[i + 1].split("=", 1)
    sets[k] = v
m = cfg["model"]
get = lambda k: int(sets.get("model." + k, m[k]))
extent = math.ceil((3 * get("hidden_size") * get("moe_intermediate_size") * 12 + 16) / 4096) * 4096
print(extent, get("num_layers") * get("num_experts"))
PY
)"
tokens_per_step=$(/usr/bin/python3 -c "
import json, sys
cfg = json.load(open('$config'))['data']
a = '${sets[*]}'.split()
for x in a:
    if x.startswith('data.batch_size='): cfg['batch_size'] = int(x.split('=')[1])
    if x.startswith('data.seq_len='): cfg['seq_len'] = int(x.split('=')[1])
print(cfg['batch_size'] * cfg['seq_len'])")
cache_mib=$(/usr/bin/python3 -c "print(max(1, int($experts * $fraction)) * $extent / 2**20 + 1e-6)")

run() {  # run TAG MODE ROUND
  local tag=$1 mode=$2 store=()
  case $mode in
    memory) store=(--set expert_store.dir=) ;;
    prefetch | noprefetch)
      rm -rf "$store_root/bench-$tag"
      store=(--set "expert_store.dir=\"$store_root/bench-$tag\"" --set "expert_store.filesystem=$fs"
             --set "expert_store.cache_mib=$cache_mib"
             --set "expert_store.prefetch=$([[ $mode == prefetch ]] && echo true || echo false)") ;;
  esac
  local trace=()
  if [[ ${TRACE:-0} == 1 && $tag == prefetch-0 ]]; then
    trace=(--set log.routing_trace="$work/trace.txt" --set log.routing_trace_tokens=1000000)
    echo "$tokens_per_step" >"$work/trace.txt.tokens"
  fi
  /usr/bin/time -v -o "$work/$tag.time" "$switchyard" train --config "$config" "${sets[@]}" \
    --set train.steps=$((warmup + steps)) --set train.threads="$threads" \
    --set train.eval_every=0 --set train.eval_batches=1 --set checkpoint.dir= \
    --set log.metrics="$work/$tag.jsonl" --set log.every=1 --set log.progress=none \
    "${store[@]}" "${trace[@]}" >"$work/$tag.txt" 2>&1 || { cat "$work/$tag.txt" >&2; exit 1; }
  rm -rf "$store_root/bench-$tag"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
modes=(memory prefetch noprefetch)
for ((r = 0; r < rounds; ++r)); do
  for ((i = 0; i < 3; ++i)); do
    mode=${modes[$(((i + r) % 3))]}
    run "$mode-$r" "$mode"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

fio_line=""
if [[ ${FIO:-0} == 1 ]]; then
  fio_line=$(benchmarks/train/fio_extent.sh "$store_root" "$extent" 1G 10)
fi

if [[ ${TRACE:-0} == 1 ]]; then
  # The routing trace has one trace step per token; the store's access pattern is, per training
  # step, the union over its tokens (each activated expert's state is taken once by the update).
  benchmarks/train/store_trace.py "$work/trace.txt" "$(cat "$work/trace.txt.tokens")" \
    "$work/store-trace.txt"
  "$switchyard" bench cache --trace "$work/store-trace.txt" --fractions "$fraction" \
    --warmup 0.25 >"$work/cache.txt"
fi

/usr/bin/python3 - "$work" "$rounds" "$warmup" "$extent" "$experts" "$cache_mib" "$fio_line" <<PY >"$out"
import json, os, re, statistics, sys
work, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
extent, experts, cache_mib = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
fio = [float(x) for x in sys.argv[7].split()] if sys.argv[7] else None
med = statistics.median
res = {}
for mode in ("memory", "prefetch", "noprefetch"):
    runs = []
    for r in range(rounds):
        rows = [json.loads(l) for l in open(f"{work}/{mode}-{r}.jsonl") if '"step_seconds"' in l]
        rows = [x for x in rows if x["step"] > warmup]
        rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                            open(f"{work}/{mode}-{r}.time").read()).group(1))
        runs.append({"rows": rows, "step": med(x["step_seconds"] for x in rows),
                     "tok_s": med(x["tokens_per_s"] for x in rows), "rss_mib": rss / 1024})
    res[mode] = runs
tokens = json.loads(open(f"{work}/memory-0.jsonl").readline())
print("## Store-backed training vs in-memory (run_store_bench.sh)\n")
print("\`\`\`")
print("date:     $(date -u '+%Y-%m-%d %H:%M UTC')")
print("cpu:      $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores (threads used: $threads)")
print("memory:   $(free -g | awk '/Mem:/{print $2}') GiB; store on $(df --output=source,fstype "$store_root" | tail -1) (expert_store.filesystem=$fs)")
print("load:     $load_before before, $load_after after")
print("model:    examples/configs/store.json ${sets[*]}")
print("experts:  %d per rank, %.1f MiB of state each, %.0f MiB in all; cache %.1f MiB (%.0f%%)" %
      (experts, extent / 2**20, experts * extent / 2**20, cache_mib, 100 * cache_mib * 2**20 / (experts * extent)))
print("runs:     $rounds rounds of memory / store+prefetch / store without prefetch, order rotated;")
print("          each $steps timed steps after $warmup warm-up; medians of per-run medians")
print("\`\`\`\n")
base = med(r["tok_s"] for r in res["memory"])
print("| mode | tokens/s | step (s) | vs memory | hit rate | read MB/step | written MB/step | read s/step | hidden | wait s/step | peak RSS MiB |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
breakdown = []
for mode, name in (("memory", "in memory"), ("prefetch", "store, prefetch"), ("noprefetch", "store, no prefetch")):
    runs = res[mode]
    tok = med(r["tok_s"] for r in runs)
    step = med(r["step"] for r in runs)
    rss = max(r["rss_mib"] for r in runs)
    st = [x["expert_store"] for r in runs for x in r["rows"] if "expert_store" in x]
    if st:
        read_s = sum(s["read_seconds"] for s in st)
        hid = sum(s["read_seconds"] * s["hidden_fraction"] for s in st) / read_s if read_s > 0 else 1.0
        hits = sum(s["hits"] for s in st); acc = hits + sum(s["misses"] for s in st)
        cells = "%.1f%% | %.0f | %.0f | %.3f | %.2f | %.3f" % (
            100 * hits / max(acc, 1), med(s["bytes_read"] for s in st) / 1e6,
            med(s["bytes_written"] for s in st) / 1e6, med(s["read_seconds"] for s in st), hid,
            med(s["wait_seconds"] for s in st))
    else:
        cells = " | ".join(["-"] * 6)
    print("| %s | %.0f | %.3f | **%.2fx** | %s | %.0f |" % (name, tok, step, tok / base, cells, rss))
    rows = [x for r in runs for x in r["rows"]]
    ph = lambda k: med(x["phase_seconds"][k] for x in rows)
    sm = lambda k: med(s.get(k, 0.0) for s in st) if st else None
    fmt = lambda v: "-" if v is None else "%.3f" % v
    breakdown.append("| %s | %.3f | %.3f | %.3f | %.3f | %s | %s | %s | %s | %s |" % (
        name, step, ph("forward"), ph("backward"), ph("optimizer"), fmt(sm("read_seconds")),
        fmt(sm("write_seconds")), fmt(sm("wait_seconds")), fmt(sm("update_seconds")),
        fmt(sm("end_step_seconds"))))
print()
print("Where the time goes (medians per step, seconds): the phases, and within them the store's "
      "wall time with a read or a write-back in flight (overlapping compute or not), the time "
      "the trainer waited for a state, the store's AdamW with its waits (optimizer phase), and "
      "the wait for the step's write-back at its end (optimizer phase):\n")
print("| mode | step | forward | backward | optimizer | read | write | wait | update | end-step write-back |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
print("\n".join(breakdown))
print()
print("Per round (tokens/s): " + "; ".join(
    "round %d: memory %.0f, prefetch %.0f, no prefetch %.0f" % (
        r, res["memory"][r]["tok_s"], res["prefetch"][r]["tok_s"], res["noprefetch"][r]["tok_s"])
    for r in range(rounds)))
st = [x["expert_store"] for r in res["prefetch"] for x in r["rows"]]
read_bytes = sum(s["bytes_read"] for s in st)
read_s = sum(s["read_seconds"] for s in st)
if read_s > 0:
    print("\nStore reads during training (prefetch runs): %.0f MB/s of wall time with a read in flight" %
          (read_bytes / read_s / 1e6) + (
          "; fio on the same file system (io_uring, O_DIRECT, bs = one extent, iodepth 4): "
          "randread %.0f MB/s, randwrite %.0f MB/s" % (fio[0], fio[1]) if fio else ""))
if os.path.exists(f"{work}/cache.txt"):
    print("\nThe recorded access trace (the prefetch run of round 0, its routing of every token; "
          "per training step and layer, the experts activated: what the update takes from the "
          "store) replayed by \`switchyard bench cache --trace T "
          "--fractions $fraction --warmup 0.25\` (demand fetching, the first quarter of the steps "
          "warms the cache):\n")
    print("\`\`\`")
    print(open(f"{work}/cache.txt").read().rstrip())
    print("\`\`\`")
PY
