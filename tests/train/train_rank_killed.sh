#!/usr/bin/env bash
# train_rank_killed.sh [--store] [--run-resume] LIMIT_SECONDS SIGNAL TIMEOUT_S PATTERN SWITCHYARD
#                      CONFIG -- MPIRUN...
# Starts `MPIRUN -np 3 SWITCHYARD train` on CONFIG for a long run (6 experts, EP = 3, a global batch
# of 12, parallel.timeout_s = TIMEOUT_S), waits until rank 0 has logged 3 steps, sends SIGNAL (KILL
# or STOP) to rank 1 and requires the whole job to end, non-zero, within LIMIT_SECONDS of the
# signal, with output matching the extended regex PATTERN (several joined by " && ": each). Fails when the job hangs, exits 0, or
# says something else. SIGKILL: mpirun sees rank 1 die. SIGSTOP: nobody dies; the other ranks
# must give up on their collective after TIMEOUT_S and abort the job.
# --store: the expert states on the expert store (expert_store.dir in the run's dir, a cache of 2
# experts a rank). --run-resume: then runs the command the log printed for resuming on the ranks
# left, as printed (through sh, with mpirun allowed to run as root and to oversubscribe) with
# `--set train.steps=S+2` appended, S the step of the last checkpoint, and requires it to resume
# from that checkpoint and finish; with --store also that it rebuilt rank 0's store file for its
# experts and left exactly the store files of its ranks.
set -uo pipefail
store=0 run_resume=0
while [[ "${1:-}" == --* && "${1:-}" != "--" ]]; do
  case "$1" in
    --store) store=1 ;;
    --run-resume) run_resume=1 ;;
    *) echo "FAIL: unknown option $1"; exit 1 ;;
  esac
  shift
done
limit=$1 signal=$2 timeout_s=$3 pattern=$4 bin=$5 config=$6
shift 6
[[ "${1:-}" == "--" ]] && shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/sy_train_kill.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
store_sets=()
if (( store )); then
  store_sets=(--set expert_store.dir="\"$dir/store\"" --set expert_store.filesystem=posix
              --set expert_store.cache_mib=0.3)
fi
"$@" -np 3 "$bin" train --config "$config" --set train.steps=1000000 --set train.eval_every=0 \
  --set log.every=1 --set log.progress=lines --set log.metrics="$dir/m.jsonl" \
  --set model.num_experts=6 --set parallel.ep_size=3 --set data.batch_size=12 \
  --set parallel.timeout_s="$timeout_s" --set checkpoint.dir="$dir/ckpt" --set checkpoint.every=2 \
  "${store_sets[@]}" >"$dir/out.txt" 2>&1 &
job=$!
# Wait (at most 120 s) for 3 logged steps.
for _ in $(seq 1200); do
  [[ -f "$dir/m.jsonl" ]] && (( $(wc -l <"$dir/m.jsonl") >= 3 )) && break
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
if ! kill -0 $job 2>/dev/null; then
  cat "$dir/out.txt"; echo "FAIL: the job ended before the kill"; exit 1
fi
# Rank 1: the process under this job's mpirun whose environment says OMPI_COMM_WORLD_RANK=1.
victim=""
for pid in $(pgrep -P $job); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
    victim=$pid
  fi
done
if [[ -z "$victim" ]]; then
  kill -9 $job; cat "$dir/out.txt"; echo "FAIL: rank 1 not found under mpirun $job"; exit 1
fi
steps=$(wc -l <"$dir/m.jsonl")
echo "sending SIG$signal to rank 1 (pid $victim) after $steps steps"
start_ns=$(date +%s%N)
kill -s "$signal" "$victim"
status=""
while (( ($(date +%s%N) - start_ns) / 1000000000 < limit )); do
  if ! kill -0 $job 2>/dev/null; then
    wait $job; status=$?; break
  fi
  sleep 0.1
done
elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
cat "$dir/out.txt"
if [[ -z "$status" ]]; then
  kill -9 "$victim" $job 2>/dev/null
  echo "FAIL: the job did not end within ${limit}s of the signal (hung)"; exit 1
fi
echo "--- exit status $status ${elapsed_ms} ms after SIG$signal (limit ${limit}s)"
if [[ $status -eq 0 ]]; then echo "FAIL: the job exited 0"; exit 1; fi
# PATTERN may be several, joined by " && ": each must match some line.
rest="$pattern"
while [[ -n "$rest" ]]; do
  one="${rest%% && *}"
  [[ "$one" == "$rest" ]] && rest="" || rest="${rest#* && }"
  if ! grep -Eq -- "$one" "$dir/out.txt"; then
    echo "FAIL: the output does not match /$one/"; exit 1
  fi
done
if (( run_resume )); then
  command=$(sed -n 's/^if a rank is lost, resume on the ranks left with: //p' "$dir/out.txt" | head -1)
  last=$(ls "$dir/ckpt" | sed -n 's/^step-0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -1)
  if [[ -z "$command" || -z "$last" ]]; then
    echo "FAIL: no resume command ('$command') or no checkpoint ('$last')"; exit 1
  fi
  echo "--- running the printed command to step $((last + 2)): $command"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    sh -c "$command --set train.steps=$((last + 2))" >"$dir/resume.txt" 2>&1
  resumed=$?
  cat "$dir/resume.txt"
  if (( resumed != 0 )); then echo "FAIL: the printed resume command exited $resumed"; exit 1; fi
  for want in "resumed from $dir/ckpt/step-0*$last.h5 at step $last" "final step $((last + 2)) "; do
    if ! grep -Eq -- "$want" "$dir/resume.txt"; then
      echo "FAIL: the resumed run's output does not match /$want/"; exit 1
    fi
  done
  if (( store )); then
    if ! grep -Eq "rank-0.store holds 2 experts per layer, .* this rank has 3: rebuilding it" \
        "$dir/resume.txt"; then
      echo "FAIL: the resumed run did not rebuild rank 0's store for its 3 experts a layer"; exit 1
    fi
    files=$(ls "$dir/store" | tr '\n' ' ')
    if [[ "$files" != "rank-0.lock rank-0.store rank-1.lock rank-1.store " ]]; then
      echo "FAIL: store files after the resume: $files"; exit 1
    fi
  fi
  echo "the printed command resumed at step $last on the ranks left and reached step $((last + 2))"
fi
echo "PASS: the job ended with status $status"
