#!/usr/bin/env bash
# rank-loss-campaign.sh N: kills one rank of a `mpirun -np 3` training job with SIGKILL, N times
# (default 20), and checks that the job ends everywhere, says which rank was lost, and resumes.
#
# The trials take turns at four places:
#   all-to-all  a random instant of expert-parallel training (EP = 3): most of a step is the
#               dispatch and combine exchange and the expert compute between them
#   zero3       the same with parallel.zero_stage = 3 (the dense parameters gathered per layer)
#   save        the moment a checkpoint save is under way (a *.tmp.* file appears)
#   eval        a random instant of a run that evaluates every step over many batches
# The victim is a random rank (0, 1 or 2). Every trial must end the whole job, non-zero, within
# LIMIT seconds (default 60) of the kill, with mpirun's message naming the lost rank; then
# `--resume` must continue from the last checkpoint and finish two more steps.
#
# Prints a line per trial and a summary with the worst exit time, also written to $OUT (default
# rank-loss-campaign.txt). Exits non-zero on any failed trial.
# Environment: SWITCHYARD (default build/switchyard), CONFIG (default examples/configs/tiny.json),
# LIMIT, SEED (default 1), OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
bin=$(realpath "${SWITCHYARD:-build/switchyard}")
config=$(realpath "${CONFIG:-examples/configs/tiny.json}")
limit=${LIMIT:-60}
out=${OUT:-rank-loss-campaign.txt}
RANDOM=${SEED:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/sy_rank_loss.XXXXXX") || exit 1
job=""
cleanup() {
  [ -n "$job" ] && kill -9 -- "-$job" 2>/dev/null
  pkill -9 -f "$work/" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3)
places=(all-to-all zero3 save eval)

failures=0 worst_ms=0 resumed=0
for ((t = 0; t < trials; ++t)); do
  place=${places[$((t % 4))]}
  ckpt="$work/t$t"
  args=(train --config "$config" --set model.num_experts=6 --set parallel.ep_size=3
        --set data.batch_size=12 --set checkpoint.dir="$ckpt" --set checkpoint.every=2
        --set log.progress=lines --set log.every=1 --set parallel.timeout_s=30)
  case $place in
    zero3) args+=(--set parallel.zero_stage=3) ;;
    eval) args+=(--set train.eval_every=1 --set train.eval_batches=64) ;;
  esac
  [ "$place" != eval ] && args+=(--set train.eval_every=0)
  setsid "${mpirun[@]}" "$bin" "${args[@]}" --set train.steps=1000000 >"$work/out.txt" 2>&1 &
  job=$!
  # Wait for the first checkpoint (so there is one to resume from), at most 120 s.
  waited=timeout
  for _ in $(seq 1200); do
    compgen -G "$ckpt/step-*.h5" >/dev/null && { waited=checkpoint; break; }
    kill -0 "$job" 2>/dev/null || { waited=ended; break; }
    sleep 0.1
  done
  victim_rank=$((RANDOM % 3))
  victim="" ranks=""
  for pid in $(pgrep -s "$job"); do
    rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$rank" ] && ranks="$ranks $pid:$rank"
    [ "$rank" = "$victim_rank" ] && victim=$pid
  done
  if [ -z "$victim" ] || ! kill -0 "$job" 2>/dev/null; then
    # Which of the three: the job ended, no checkpoint came, or the rank's process was not seen.
    why="rank $victim_rank's process is not among the job's (pid:rank$ranks)"
    [ "$waited" = timeout ] && why="no checkpoint within 120 s; $why"
    kill -0 "$job" 2>/dev/null || why="the job ended before the kill"
    echo "trial $t ($place): FAIL: $why"
    tail -5 "$work/out.txt"
    failures=$((failures + 1))
    kill -9 -- "-$job" 2>/dev/null
    job=""
    continue
  fi
  if [ "$place" = save ]; then
    for _ in $(seq 3000); do
      compgen -G "$ckpt/*.tmp.*" >/dev/null && break
      sleep 0.01
    done
  else
    sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  fi
  start_ns=$(date +%s%N)
  kill -9 "$victim"
  status=""
  while (( ($(date +%s%N) - start_ns) / 1000000000 < limit )); do
    if ! kill -0 "$job" 2>/dev/null; then
      { wait "$job"; } 2>/dev/null
      status=$?
      break
    fi
    sleep 0.05
  done
  elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
  problems=""
  if [ -z "$status" ]; then
    problems="the job did not end within ${limit}s"
    kill -9 -- "-$job" 2>/dev/null
  elif [ "$status" -eq 0 ]; then
    problems="the job exited 0"
  elif ! grep -Eq "rank $victim_rank .*(signal 9|Killed)" "$work/out.txt"; then
    problems="no message names rank $victim_rank"
  fi
  job=""
  pkill -9 -f "$ckpt " 2>/dev/null
  [ "$elapsed_ms" -gt "$worst_ms" ] && worst_ms=$elapsed_ms
  if [ -z "$problems" ]; then
    last=$(ls "$ckpt"/step-*.h5 | sort | tail -1 | sed 's/.*step-0*\([0-9]*\)\.h5/\1/')
    if "${mpirun[@]}" "$bin" "${args[@]}" --set train.steps=$((last + 2)) --resume \
        >"$work/resume.txt" 2>&1 && grep -q "resumed from" "$work/resume.txt"; then
      resumed=$((resumed + 1))
    else
      problems="the resume from step $last failed"
      tail -5 "$work/resume.txt"
    fi
  fi
  if [ -n "$problems" ]; then
    failures=$((failures + 1))
    echo "trial $t ($place, rank $victim_rank): FAIL: $problems"
    tail -5 "$work/out.txt"
  else
    echo "trial $t ($place, rank $victim_rank): the job ended ${elapsed_ms} ms after the kill," \
      "status $status; resumed"
  fi
  rm -rf "$ckpt"
done
summary="rank-loss-campaign: $trials trials (np 3: all-to-all, zero3, save, eval), $failures failed, \
$resumed resumed; worst exit ${worst_ms} ms after the kill (limit ${limit}s); $(nproc) cores"
echo "$summary"
echo "$summary" >"$out"
[ "$failures" -eq 0 ]
