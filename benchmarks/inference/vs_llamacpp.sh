#!/usr/bin/env bash
# Switchyard against llama.cpp on the decode-bench model (issue 18): llama-bench and
# `switchyard bench decode` alternated in one sitting, the same threads, batch 1. Runnable by
# hand; not part of the CI test run (it builds llama.cpp and takes minutes).
#
#   benchmarks/inference/vs_llamacpp.sh [OUTPUT.md]     (default: appended to
#                                                        benchmarks/inference-results.md)
#
# 1. Builds llama.cpp from the llama-cpp-python sdist on PyPI (scripts/build-llamacpp.sh, cached).
# 2. Writes the decode-bench model (write_decode_bench_model.py: Mixtral format, bf16, with the
#    two-letter SentencePiece tokenizer of tests/inference/hf_moe_oracle.py, which llama.cpp's
#    converter needs) and converts it with llama.cpp's own convert_hf_to_gguf.py to bf16, then
#    llama-quantize to Q8_0 and Q4_0 (kept in $GGUF_DIR between runs).
# 3. ROUNDS times, alternating: per type, llama-bench (-p 32,LONG_PREFILL -n GEN_LEN -r 1
#    -t THREADS) and Switchyard: `bench decode --prompt-len 32 --gen-len GEN_LEN` (decode tokens/s
#    and the 32-token prefill) and `bench decode --prompt-len LONG_PREFILL --gen-len 1`.
#    Switchyard runs bf16 from the Hugging Face directory; for Q8_0 / Q4_0 it is asked to run
#    llama.cpp's quantized GGUF (`--model x.gguf`), then `--quantize experts --quant-type q8_0|q4_0`
#    on the directory (experts quantized on load, the rest bf16); when
#    it cannot yet, the row says so and is skipped (llama.cpp's figures are still recorded).
# 4. Writes the medians and the median of the per-round ratios Switchyard / llama.cpp, the
#    machine (CPU, cores, memory, load before and after), both versions and the commands.
#
# Note: llama-bench's tg test decodes from an empty context; Switchyard's decode steps follow its
# 32-token prompt. Both are batch 1.
#
# Environment: SWITCHYARD (default build/switchyard), MODEL_DIR (default
# ${BUILD_DIR:-build}/decode_bench_model), GGUF_DIR (default ${BUILD_DIR:-build}/decode_bench_gguf),
# THREADS (default nproc), ROUNDS (default 3), GEN_LEN (default 64), WARMUP (default 4), TYPES
# (default "bf16 q8_0 q4_0"), LONG_PREFILL (default 512; 0 leaves the long prefill out, for a
# quick run on a loaded machine), LLAMACPP_CACHE (scripts/build-llamacpp.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benchmarks/inference-results.md}
switchyard=${SWITCHYARD:-build/switchyard}
model=${MODEL_DIR:-${BUILD_DIR:-build}/decode_bench_model}
gguf_dir=${GGUF_DIR:-${BUILD_DIR:-build}/decode_bench_gguf}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-3}
gen_len=${GEN_LEN:-64}
warmup=${WARMUP:-4}
types=${TYPES:-bf16 q8_0 q4_0}
long=${LONG_PREFILL:-512}
prefills=32
((long > 0)) && prefills=32,$long
log() { echo "[vs_llamacpp] $*" >&2; }
[[ -x $switchyard ]] || { log "error: $switchyard is not built (scripts/build.sh)"; exit 1; }

ll=$(scripts/build-llamacpp.sh | tail -1)
bin=$ll/build/bin
py=$(dirname "$ll")/venv/bin/python
/usr/bin/python3 benchmarks/inference/write_decode_bench_model.py "$model" >&2

mkdir -p "$gguf_dir"
bf16=$gguf_dir/model-bf16.gguf
if [[ ! -f $bf16 || $model/config.json -nt $bf16 ]]; then
  log "converting $model with llama.cpp's convert_hf_to_gguf.py (bf16)"
  "$py" scripts/llamacpp_convert.py "$ll/src/convert_hf_to_gguf.py" "$model" \
    --outfile "$bf16.tmp" --outtype bf16 >&2
  mv "$bf16.tmp" "$bf16"
fi
for t in $types; do
  [[ $t == bf16 ]] && continue
  q=$gguf_dir/model-$t.gguf
  if [[ ! -f $q || $bf16 -nt $q ]]; then
    log "llama-quantize $bf16 -> $q (${t^^})"
    "$bin/llama-quantize" "$bf16" "$q.tmp" "${t^^}" >&2
    mv "$q.tmp" "$q"
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# sy_decode TYPE PROMPT_LEN GEN_LEN JSON: Switchyard on TYPE; 1 when it cannot run that type.
sy_decode() {
  local t=$1 p=$2 g=$3 json=$4
  local common=(--prompt-len "$p" --gen-len "$g" --warmup "$warmup" --threads "$threads"
    --stream-mib 256 --stream-repeats 2 --json-out "$json")
  if [[ $t == bf16 ]]; then
    "$switchyard" bench decode --model "$model" --dtype bf16 "${common[@]}" >"$json.txt" 2>"$json.err"
    return
  fi
  "$switchyard" bench decode --model "$gguf_dir/model-$t.gguf" "${common[@]}" \
    >"$json.txt" 2>"$json.err" && return
  "$switchyard" bench decode --model "$model" --quantize experts --quant-type "$t" "${common[@]}" \
    >"$json.txt" 2>>"$json.err" && return
  return 1
}

declare -A sy_ok
for t in $types; do sy_ok[$t]=1; done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$rounds"); do
  for t in $types; do
    "$bin/llama-bench" -m "$gguf_dir/model-$t.gguf" -t "$threads" -p "$prefills" -n "$gen_len" -r 1 \
      -o json >"$work/ll-$t-$i.json" 2>"$work/ll-$t-$i.err" ||
      { cat "$work/ll-$t-$i.err" >&2; exit 1; }
    if [[ ${sy_ok[$t]} == 1 ]]; then
      if sy_decode "$t" 32 "$gen_len" "$work/sy-$t-$i-32.json"; then
        if ((long > 0)); then
          sy_decode "$t" "$long" 1 "$work/sy-$t-$i-long.json" ||
            { cat "$work/sy-$t-$i-long.json.err" >&2; exit 1; }
        fi
      elif [[ $t == bf16 ]]; then
        cat "$work/sy-$t-$i-32.json.err" >&2
        exit 1
      else
        sy_ok[$t]=0
        tail -n 2 "$work/sy-$t-$i-32.json.err" | sed 's/^/  /' >"$work/skip-$t"
        log "switchyard cannot run $t yet; its rows are skipped:"
        cat "$work/skip-$t" >&2
      fi
    fi
  done
  log "round $i/$rounds done"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(lscpu | sed -n 's/^Model name: *//p')
flags=$(grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|avx_vnni|amx_bf16' /proc/cpuinfo |
  sort -u | tr '\n' ' ')
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- runtime inference launcher || echo ' (+ local changes)')"
{
  [[ $out == benchmarks/inference-results.md ]] && echo
  /usr/bin/python3 - "$work" "$rounds" "$types" "$long" <<PY
import json, os, statistics, sys
work, rounds, types, long = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
med = statistics.median
print("## Switchyard vs llama.cpp: decode and prefill, CPU, batch 1\n")
print("\`\`\`")
print("date:      $(date -u '+%Y-%m-%d %H:%M UTC')")
print("switchyard: $commit")
print("llama.cpp: llama-cpp-python $(basename "$ll") sdist (vendor/llama.cpp), build " +
      json.load(open(f"{work}/ll-{types[0]}-1.json"))[0].get("build_commit", "?") +
      ", Release, GGML_NATIVE")
print("cpu:       $cpu ($flags)")
print("cores:     $(nproc) (threads used: $threads, both)")
print("memory:    $(free -g | awk '/Mem:/{print $2}') GiB")
print("load:      $load_before before, $load_after after (a shared machine: other jobs ran)")
print("model:     decode-bench model (Mixtral format: hidden 1024, 8 experts of 2048, top-2, "
      "12 layers, vocab 256); llama.cpp: convert_hf_to_gguf.py --outtype bf16, llama-quantize")
print("rounds:    $rounds, alternating llama-bench and switchyard per type")
print("commands:  llama-bench -m model-TYPE.gguf -t $threads -p $prefills -n $gen_len -r 1 -o json")
print("           switchyard bench decode --model MODEL --dtype bf16 --prompt-len 32 "
      "--gen-len $gen_len --warmup $warmup --threads $threads")
if long:
    print(f"           switchyard bench decode ... --prompt-len {long} --gen-len 1")
print("\`\`\`\n")
print("| type | measure | llama.cpp tokens/s (median) | Switchyard tokens/s (median) "
      "| Switchyard / llama.cpp (median of rounds) | rounds: ratio |")
print("| --- | --- | --- | --- | --- | --- |")
for t in types:
    ll = [json.load(open(f"{work}/ll-{t}-{i}.json")) for i in range(1, rounds + 1)]
    def llts(run, p, n):
        return next(r["avg_ts"] for r in run if r["n_prompt"] == p and r["n_gen"] == n)
    measures = [("decode", 0, lambda r: llts(r, 0, $gen_len)),
                ("prefill 32", 32, lambda r: llts(r, 32, 0))]
    if long:
        measures.append((f"prefill {long}", long, lambda r: llts(r, long, 0)))
    have_sy = all(os.path.exists(f"{work}/sy-{t}-{i}-32.json") for i in range(1, rounds + 1))
    for name, p, get in measures:
        lv = [get(r) for r in ll]
        if not have_sy:
            print(f"| {t} | {name} | {med(lv):.1f} | skipped | - | switchyard cannot run {t} "
                  "yet |")
            continue
        sv = []
        for i in range(1, rounds + 1):
            if p == 0:
                sv.append(json.load(open(f"{work}/sy-{t}-{i}-32.json"))["tokens_per_s"])
            else:
                j = json.load(open(f"{work}/sy-{t}-{i}-{32 if p == 32 else 'long'}.json"))
                sv.append(p / j["prefill_seconds"])
        ratios = [s / l for s, l in zip(sv, lv)]
        print(f"| {t} | {name} | {med(lv):.1f} | {med(sv):.1f} | **{med(ratios):.2f}** | "
              + ", ".join(f"{r:.2f}" for r in ratios) + " |")
if "bf16" in types:
    base = med([next(r["avg_ts"] for r in json.load(open(f"{work}/ll-bf16-{i}.json"))
                     if r["n_gen"] > 0) for i in range(1, rounds + 1)])
    for t in types:
        if t == "bf16":
            continue
        q = med([next(r["avg_ts"] for r in json.load(open(f"{work}/ll-{t}-{i}.json"))
                      if r["n_gen"] > 0) for i in range(1, rounds + 1)])
        print(f"\nllama.cpp {t} decode against its own bf16: {q / base:.2f}x", end="")
    print()
for t in types:
    f = f"{work}/skip-{t}"
    if os.path.exists(f):
        print(f"\nSwitchyard {t}: skipped, it said:\n\n\`\`\`\n{open(f).read().rstrip()}\n\`\`\`")
PY
} >>"$out"
log "written to $out"
