#!/usr/bin/env bash
# The GPU checks of docs/gpu-validation.md, in one run on a machine with an NVIDIA GPU and none of
# Switchyard's Debian packages: unpacks .gpu/bundle.tar.xz (scripts/gpu/bundle.sh), then runs
#   1. the CUDA test suite: every operator against the double-precision reference on cuda:0,
#      the fused AdamW kernel, the workspace, the KV-cache decoder on cuda:0, NCCL on one rank;
#   2. selftest --device cuda:0;
#   3. every offload policy on cuda:0 (bench infer: each must give resident's tokens), with the
#      measured pinned host-to-device bandwidth beside it (the PCIe bound of on-demand decode);
#   4. training on cuda:0 (and ZeRO-3 on two ranks sharing it), with the model FLOP utilisation,
#      and the expert store on cuda:0 beside it in memory;
#   5. reproducibility: the same training on cuda:0 twice, every loss and gradient norm equal;
#   6. distributed training on cuda:0 (two ranks sharing the GPU), without and with ZeRO-3, each
#      against one process (tests/train/distributed_equivalence.py: losses, checkpoints, resumes).
# Each step has its own time limit and log; a failed step does not stop the others. Writes
# $OUT/summary.txt and $OUT/logs.tar.gz (or ./gpu-out without OUT).
#
#   scripts/gpu/validate.sh [STEP...]
#   (steps: env tests selftest offload train train-bf16 repro zero3; default all)
# train-bf16: issue 41's bf16 training on one GPU (benchmarks/train/gpu-bf16.json, and gpu.json in
# bf16), with its MFU against the BF16 tensor peak.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
logs=$(mktemp -d)
summary=$out/summary.txt
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(env tests selftest offload train train-bf16 repro zero3)
export PYTHONUNBUFFERED=1
work=/tmp/sy-gpu
mkdir -p "$work"

note() { echo "$*" | tee -a "$summary"; }
# run NAME LIMIT_S COMMAND...: runs one check, logs it, notes pass/fail and its time.
run() {
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local dt=$(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')")
  if [ $rc -eq 0 ]; then note "PASS $name (${dt}s)"; else note "FAIL $name rc=$rc (${dt}s)"; tail -15 "$logs/$name.log" | sed 's/^/    /' | tee -a "$summary"; fi
  return $rc
}

# The bundle: binaries, their libraries and Open MPI's components at their configured paths.
if [ ! -x "$work/bin/switchyard" ]; then
  tar -C "$work" -xJf .gpu/bundle.tar.xz
  mkdir -p /usr/lib/x86_64-linux-gnu/openmpi/lib /usr/share
  [ -e /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 ] || cp -a "$work/ompi/openmpi3" /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
  [ -e /usr/share/openmpi ] || cp -a "$work/ompi/share-openmpi" /usr/share/openmpi
  [ -d "$work/ompi/pmix2" ] && [ ! -e /usr/lib/x86_64-linux-gnu/pmix2 ] && cp -a "$work/ompi/pmix2" /usr/lib/x86_64-linux-gnu/pmix2
  # Where the machine has a library of the same SONAME (the same ABI, usually newer), use its own:
  # its Open MPI components, say, were built against its own PMIx.
  for f in "$work"/lib/*; do
    ldconfig -p | grep -q "^[[:space:]]*$(basename "$f") " && rm -f "$f"
  done
fi
mpirun=$(command -v mpirun || echo "$work/bin/mpirun")
cuda_libs=""
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  p=$(find /usr/local/cuda*/ /usr/lib /opt -name "$l" 2>/dev/null | head -1)
  [ -n "$p" ] && [[ ":$cuda_libs:" != *":$(dirname "$p"):"* ]] && cuda_libs="$cuda_libs:$(dirname "$p")"
done
export LD_LIBRARY_PATH="$work/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_MCA_ess_singleton_isolated=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bin=$work/bin
sy=$bin/switchyard

for step in "${steps[@]}"; do
  case $step in
  env)
    note "== env $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null)"
    note "$(nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader)"
    note "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc)"
    note "LD_LIBRARY_PATH=$LD_LIBRARY_PATH; mpirun $mpirun; bundled libraries used: $(ls "$work/lib" | wc -l)"
    missing=$(ldd "$bin"/* | grep "not found" | sort -u)
    [ -n "$missing" ] && note "missing libraries: $missing"
    run version 30 "$sy" --version
    ;;
  tests)
    run backend_ops_cuda 300 "$bin/sy_backend_ops_test" --gtest_filter='cuda/*:BackendOpsCuda.*'
    run workspace 120 "$bin/sy_runtime_core_test" --gtest_filter='*Workspace*:*Releasable*'
    run optim_cuda 120 "$bin/optim_cuda_test"
    # The trainer tests read examples/configs at the path they were built with.
    [ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
    run trainer_cuda 300 "$bin/sy_train_test" --gtest_filter='*Cuda*'
    grep -E "^\[ +(OK|FAILED|SKIPPED) +\]" "$logs/trainer_cuda.log" | tee -a "$summary"
    run kv_cache_decoder 300 "$bin/inference_kv_cache_decoder_test" --gtest_filter='*cuda*:*Cuda*'
    run generate_engine_cuda 300 "$bin/inference_generate_engine_test" --gtest_filter='*cuda*'
    run engine_thread_cuda 300 "$bin/inference_engine_thread_test" --gtest_filter='*cuda*'
    run nccl_one_rank 120 "$bin/parallel_nccl_communicator_test"
    ;;
  selftest)
    run selftest_cuda 300 "$sy" selftest --device cuda:0
    ;;
  offload)
    model=$work/decode_bench_model
    run write_model 300 env -u LD_LIBRARY_PATH python3 benchmarks/inference/write_decode_bench_model.py "$model"
    # Pinned host-to-device bandwidth: the bound of decode that copies every routed expert.
    run h2d_bandwidth 60 env -u LD_LIBRARY_PATH python3 -c "
import torch,time
x=torch.empty(256<<20,dtype=torch.uint8).pin_memory(); y=torch.empty_like(x,device='cuda')
for _ in range(3): y.copy_(x,non_blocking=True)
torch.cuda.synchronize(); t=time.perf_counter()
for _ in range(20): y.copy_(x,non_blocking=True)
torch.cuda.synchronize(); dt=time.perf_counter()-t
print(f'pinned H2D {20*x.numel()/dt/1e9:.1f} GB/s')"
    grep -h "GB/s" "$logs/h2d_bandwidth.log" | tee -a "$summary"
    run generate_cpu 120 "$sy" generate --model "$model" --device cpu --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 16
    run generate_cuda 120 "$sy" generate --model "$model" --device cuda:0 --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 16
    run bench_infer_cuda 400 "$sy" bench infer --model "$model" --device cuda:0 \
      --policies resident,ondemand,prefetch-all,ring,predictive,cpu-compute,hot-cold,layer-split \
      --device-slots 24 --prompt-len 32 --gen-len 32 --repeats 3 --json-out "$logs/bench_infer_cuda.json"
    grep -E "^\|" "$logs/bench_infer_cuda.log" | tee -a "$summary"
    run bench_infer_cuda_pregated 300 "$sy" bench infer --model "$model" --device cuda:0 --pregate \
      --policies resident,pregated,ondemand --device-slots 24 --prompt-len 32 --gen-len 32 --repeats 3
    grep -E "^\|" "$logs/bench_infer_cuda_pregated.log" | tee -a "$summary"
    ;;
  train)
    cfg=benchmarks/train/gpu.json
    common=(--set train.device=cuda:0 --set train.steps=12 --set train.eval_every=0
            --set train.eval_batches=1 --set checkpoint.dir= --set log.every=1 --set log.progress=none)
    run train_cuda 300 "$sy" train --config "$cfg" "${common[@]}" --set log.metrics="$logs/train_cuda.jsonl"
    # ZeRO-3 needs two ranks; both share the one GPU, each holding half of the experts. Same
    # global batch; the losses part only by the router's auxiliary loss, which each rank computes
    # on its own tokens.
    run train_cuda_zero3 300 "$mpirun" --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH \
      "$sy" train --config "$cfg" "${common[@]}" --set parallel.zero_stage=3 \
      --set parallel.ep_size=2 --set log.metrics="$logs/train_cuda_zero3.jsonl"
    run train_cpu_reference 300 "$sy" train --config examples/configs/tiny.json --set train.steps=5 \
      --set checkpoint.dir= --set log.every=1 --set log.progress=none --set log.metrics="$logs/tiny_cpu.jsonl"
    run train_cuda_reference 300 "$sy" train --config examples/configs/tiny.json --set train.steps=5 \
      --set train.device=cuda:0 --set checkpoint.dir= --set log.every=1 --set log.progress=none \
      --set log.metrics="$logs/tiny_cuda.jsonl"
    # Expert states on the store on cuda:0 (the working set: only the step's experts on the GPU),
    # beside the same two-layer model in memory; a cache of a quarter of the expert states.
    small=(--set model.num_layers=2 --set train.steps=6)
    run train_cuda_memory_2l 300 "$sy" train --config "$cfg" "${common[@]}" "${small[@]}" \
      --set log.metrics="$logs/train_cuda_memory_2l.jsonl"
    run train_cuda_store_2l 300 "$sy" train --config "$cfg" "${common[@]}" "${small[@]}" \
      --set expert_store.dir="$work/store" --set expert_store.cache_mib=400 \
      --set log.metrics="$logs/train_cuda_store_2l.jsonl"
    env -u LD_LIBRARY_PATH python3 - "$logs/train_cuda_memory_2l.jsonl" "$logs/train_cuda_store_2l.jsonl" <<'PY' 2>&1 | tee -a "$summary"
import json, statistics, sys
def rows(p):
    try: return [json.loads(l) for l in open(p) if '"step_seconds"' in l]
    except OSError: return []
memory, store = rows(sys.argv[1]), rows(sys.argv[2])
if memory and store:
    tm = statistics.median(r["tokens_per_s"] for r in memory[2:])
    ts = statistics.median(r["tokens_per_s"] for r in store[2:])
    print(f"2-layer cuda:0 in memory {tm:.0f} tokens/s, on the store {ts:.0f} tokens/s: {ts / tm:.2f}x")
    print("losses memory: " + " ".join(f"{r['loss']:.6f}" for r in memory))
    print("losses store:  " + " ".join(f"{r['loss']:.6f}" for r in store))
PY
    env -u LD_LIBRARY_PATH python3 benchmarks/train/gpu_mfu.py "$cfg" "$logs/train_cuda.jsonl" "$logs/train_cuda_zero3.jsonl" \
      "$logs/tiny_cpu.jsonl" "$logs/tiny_cuda.jsonl" 2>&1 | tee -a "$summary"
    ;;
  train-bf16)
    # Issue 41: the Mixtral-layer-shaped config in bf16 on one GPU (benchmarks/train/gpu-bf16.json:
    # hidden 4096, 8 experts of 14336, top-2, GQA 32/8, 4 layers, sequence 4096; raise
    # data.batch_size until memory is full), and gpu.json in bf16 beside its f32 run above.
    run train_bf16_mixtral 600 "$sy" train --config benchmarks/train/gpu-bf16.json \
      --set log.metrics="$logs/train_bf16_mixtral.jsonl"
    run train_bf16_gpu_json 300 "$sy" train --config benchmarks/train/gpu.json --set train.precision=bf16 \
      --set train.device=cuda:0 --set train.steps=12 --set checkpoint.dir= --set log.every=1 \
      --set log.progress=none --set log.metrics="$logs/train_bf16_gpu_json.jsonl"
    for pair in "benchmarks/train/gpu-bf16.json:train_bf16_mixtral" \
                "benchmarks/train/gpu.json:train_bf16_gpu_json"; do
      env -u LD_LIBRARY_PATH python3 - "${pair%%:*}" "$logs/${pair#*:}.jsonl" "$work/bf16.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg.setdefault("train", {})["precision"] = "bf16"
json.dump(cfg, open(sys.argv[3], "w"))
PY
      env -u LD_LIBRARY_PATH python3 benchmarks/train/gpu_mfu.py "$work/bf16.json" \
        "$logs/${pair#*:}.jsonl" /nonexistent /nonexistent /nonexistent 2>&1 | tee -a "$summary"
    done
    ;;
  zero3)
    # Python runs without the bundle's libraries (they clash with its own); the processes it starts
    # get them back through these wrappers.
    printf '#!/bin/sh\nexec env LD_LIBRARY_PATH="%s" "%s" "$@"\n' "$LD_LIBRARY_PATH" "$sy" >"$work/sy-env"
    chmod +x "$work/sy-env"
    equivalence=(env -u LD_LIBRARY_PATH python3 tests/train/distributed_equivalence.py
                 --switchyard "$work/sy-env" --np 2 --config examples/configs/ep4.json
                 --mpirun "env LD_LIBRARY_PATH=$LD_LIBRARY_PATH $mpirun --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH"
                 --common-set train.device=cuda:0 --set parallel.ep_size=2 --resume-check)
    run dist_cuda_ep2 400 "${equivalence[@]}"
    grep -E "equivalence|max |loss" "$logs/dist_cuda_ep2.log" | tail -4 | tee -a "$summary"
    run dist_cuda_ep2_zero3 400 "${equivalence[@]}" --set parallel.zero_stage=3
    grep -E "equivalence|max |loss" "$logs/dist_cuda_ep2_zero3.log" | tail -4 | tee -a "$summary"
    grep -h "ZeRO-3 rank 0" -A4 "$logs/dist_cuda_ep2_zero3.log" | head -5 | tee -a "$summary"
    ;;
  repro)
    # Deterministic kernels (no atomics: runtime/cuda/index.cuh) make two runs the same bits.
    cfg=benchmarks/train/gpu.json
    for run in a b; do
      run "train_cuda_repro_$run" 300 "$sy" train --config "$cfg" --set train.device=cuda:0 \
        --set train.steps=8 --set checkpoint.dir= --set log.every=1 --set log.progress=none \
        --set log.metrics="$logs/repro_$run.jsonl"
    done
    env -u LD_LIBRARY_PATH python3 - "$logs/repro_a.jsonl" "$logs/repro_b.jsonl" <<'PY' 2>&1 | tee -a "$summary"
import json, sys
def rows(p):
    try: return [json.loads(l) for l in open(p) if '"step_seconds"' in l]
    except OSError: return []
a, b = rows(sys.argv[1]), rows(sys.argv[2])
same = bool(a) and [(r["loss"], r["grad_norm"]) for r in a] == [(r["loss"], r["grad_norm"]) for r in b]
print(f"cuda:0 twice, {len(a)} steps: losses and gradient norms {'identical' if same else 'DIFFER'}")
print("run a: " + " ".join(repr(r["loss"]) for r in a))
print("run b: " + " ".join(repr(r["loss"]) for r in b))
PY
    ;;
  esac
done
tar -C "$logs" -czf "$out/logs.tar.gz" .
note "== done $(date -u +%FT%TZ)"
