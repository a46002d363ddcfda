#!/usr/bin/env bash
# crash-campaign.sh N: SIGKILLs real `switchyard train` runs N times at random instants, resuming
# each time, and checks that nothing was lost (RocksDB's crash test, on the trainer).
#
# Each cycle trains the config from scratch to STEPS steps (checkpoint every 2, keep 2) in one of
# the MODES, round robin:
#   memory      1 process, states in memory
#   memory-np2  `mpirun -np 2`, expert parallel over both ranks
#   store, store-np2  as above with expert_store.dir set (store-fed training, a quarter of the
#               expert states cached, so every step reads and writes the store), when the build
#               has it
# and kills it again and again until a run reaches the last step. A kill lands either at a random
# instant (uniform over the time an uninterrupted run of that mode took, or KILL_WINDOW seconds)
# or, every other time, the moment a checkpoint save is under way (a *.tmp.* file appears in
# checkpoint.dir), so saves are hit far
# more often than their share of the time. After each kill every checkpoint left must read back
# with h5py (an independent reader) and the next --resume must start without skipping a damaged
# checkpoint; after the last step the final checkpoint must equal an uninterrupted run's tensor for
# tensor, bit for bit (the config too, but for checkpoint.dir and how the run was started).
#
# Prints one line per cycle and a summary (kills, resumes, completed runs, corrupt checkpoints,
# failed resumes, mismatches), and exits non-zero unless the last three are all 0. The summary is
# also written to $OUT (default: crash-campaign.txt in the working directory).
#
# Environment: SWITCHYARD (default build/switchyard), CONFIG (default examples/configs/tiny.json),
# STEPS (default 30), MODES (default: every mode the build supports), KILL_WINDOW (seconds,
# default: the uninterrupted run's time), SEED (default 1), OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
kills_wanted=${1:?usage: scripts/crash-campaign.sh N}
bin=$(realpath "${SWITCHYARD:-build/switchyard}")
config=$(realpath "${CONFIG:-examples/configs/tiny.json}")
steps=${STEPS:-30}
out=${OUT:-crash-campaign.txt}
RANDOM=${SEED:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d "${TMPDIR:-/tmp}/sy_crash_campaign.XXXXXX") || exit 1
current_pgid=""
cleanup() {
  [ -n "$current_pgid" ] && kill -9 -- "-$current_pgid" 2>/dev/null
  pkill -9 -f "$work/" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${MODES:-}" ]; then
  MODES="memory memory-np2"
  if "$bin" train --config "$config" --set expert_store.dir="$work/probe" --set train.steps=1 \
      --set train.eval_every=0 --set checkpoint.dir="$work/probe-ckpt" >/dev/null 2>&1; then
    MODES="$MODES store store-np2"
  fi
  rm -rf "$work/probe" "$work/probe-ckpt"
fi
read -r -a modes <<<"$MODES"

# train_command MODE CKPT_DIR [ARGS...]: sets `cmd` to the command line of one run of MODE.
train_command() {
  local mode=$1 ckpt=$2
  shift 2
  local args=(train --config "$config" --set train.steps="$steps" --set train.eval_every=0
              --set checkpoint.dir="$ckpt" --set checkpoint.every=2 --set checkpoint.keep=2
              --set log.progress=lines "$@")
  case $mode in
    # A cache of about a quarter of the tiny config's expert states: the store is read and
    # written back every step, so kills land inside write-backs too.
    store*) args+=(--set expert_store.dir="$ckpt-store" --set expert_store.cache_mib=0.7) ;;
  esac
  case $mode in
    *-np2) cmd=(mpirun -np 2 --bind-to none "$bin" "${args[@]}" --set parallel.ep_size=2) ;;
    *) cmd=("$bin" "${args[@]}") ;;
  esac
}

# Every checkpoint in DIR reads back completely with h5py; prints the bad ones.
check_readable() {
  /usr/bin/python3 - "$1" <<'EOF'
import glob, sys
import h5py
bad = 0
for path in sorted(glob.glob(sys.argv[1] + "/step-*.h5")):
    try:
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, obj: obj[()] if isinstance(obj, h5py.Dataset) else None)
    except Exception as e:  # noqa: BLE001 - any failure to read is corruption
        print(f"corrupt: {path}: {e}")
        bad += 1
sys.exit(1 if bad else 0)
EOF
}

# Tensor for tensor, attribute for attribute, equal (the config's paths and resume flags aside).
same_checkpoint() { /usr/bin/python3 scripts/compare_checkpoints.py "$1" "$2"; }

final_name=$(printf "step-%08d.h5" "$steps")
declare -A reference window_ms
for mode in "${modes[@]}"; do
  ref="$work/ref-$mode"
  train_command "$mode" "$ref"
  t0=$(date +%s%N)
  if ! "${cmd[@]}" >"$work/ref-$mode.log" 2>&1; then
    tail -5 "$work/ref-$mode.log"
    echo "crash-campaign: the uninterrupted $mode run failed"
    exit 1
  fi
  reference[$mode]="$ref/$final_name"
  window_ms[$mode]=$(( ${KILL_WINDOW:-0} * 1000 ))
  [ "${window_ms[$mode]}" -gt 0 ] || window_ms[$mode]=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "crash-campaign: $mode: uninterrupted run ${window_ms[$mode]} ms"
done

kills=0 resumes=0 completed=0 corrupt=0 failed_resumes=0 mismatches=0 save_kills=0 cycle=0
start=$(date +%s)
while [ "$kills" -lt "$kills_wanted" ]; do
  mode=${modes[$((cycle % ${#modes[@]}))]}
  ckpt="$work/c$cycle"
  cycle_kills=0
  while :; do
    resume=()
    if compgen -G "$ckpt/step-*.h5" >/dev/null; then resume=(--resume); fi
    log="$work/run.log"
    train_command "$mode" "$ckpt" "${resume[@]}"
    setsid "${cmd[@]}" >"$log" 2>&1 &
    pid=$!
    current_pgid=$pid
    [ ${#resume[@]} -gt 0 ] && resumes=$((resumes + 1))
    in_save=$((RANDOM % 2))
    now=$(date +%s%N)
    deadline=$(( now + ((RANDOM * 32768 + RANDOM) % window_ms[$mode] + 50) * 1000000 ))
    # An in-save kill takes the first save after a random instant, not always the first save.
    saves_from=$(( now + ((RANDOM * 32768 + RANDOM) % window_ms[$mode]) * 1000000 ))
    killed=0
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$in_save" -eq 1 ] && [ "$(date +%s%N)" -ge "$saves_from" ] &&
          compgen -G "$ckpt/*.tmp.*" >/dev/null; then
        kill -9 -- "-$pid" 2>/dev/null && killed=1 && save_kills=$((save_kills + 1))
        break
      fi
      if [ "$in_save" -eq 0 ] && [ "$(date +%s%N)" -ge "$deadline" ]; then
        kill -9 -- "-$pid" 2>/dev/null && killed=1
        break
      fi
      sleep 0.01
    done
    { wait "$pid"; } 2>/dev/null
    rc=$?
    current_pgid=""
    pkill -9 -f "$ckpt " 2>/dev/null  # ranks outside the process group, if any
    if grep -q "warning: skipping checkpoint" "$log"; then
      corrupt=$((corrupt + 1))
      echo "crash-campaign: cycle $cycle ($mode) resumed past a damaged checkpoint:"
      grep "warning: skipping checkpoint" "$log"
    fi
    if [ "$killed" -eq 1 ]; then
      kills=$((kills + 1))
      cycle_kills=$((cycle_kills + 1))
      if ! check_readable "$ckpt"; then corrupt=$((corrupt + 1)); fi
      [ "$kills" -ge "$kills_wanted" ] && break
      continue
    fi
    if [ "$rc" -ne 0 ]; then
      failed_resumes=$((failed_resumes + 1))
      echo "crash-campaign: cycle $cycle ($mode) exited $rc:"
      tail -5 "$log"
      break
    fi
    completed=$((completed + 1))
    if ! same_checkpoint "${reference[$mode]}" "$ckpt/$final_name"; then
      mismatches=$((mismatches + 1))
      echo "crash-campaign: cycle $cycle ($mode) ended with other parameters than the uninterrupted run"
    fi
    break
  done
  echo "cycle $cycle ($mode): $cycle_kills kills; total $kills kills, $resumes resumes," \
    "$completed completed, $corrupt corrupt, $failed_resumes failed resumes, $mismatches mismatches"
  rm -rf "$ckpt" "$ckpt-store"
  cycle=$((cycle + 1))
done

elapsed=$(( $(date +%s) - start ))
summary="crash-campaign: $kills kills ($save_kills during a checkpoint save), $resumes resumes, \
$completed runs completed, modes: ${modes[*]}; corrupt checkpoints: $corrupt, failed resumes: \
$failed_resumes, mismatched final parameters: $mismatches; ${elapsed}s on $(nproc) cores; \
$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "$summary"
echo "$summary" >"$out"
[ "$corrupt" -eq 0 ] && [ "$failed_resumes" -eq 0 ] && [ "$mismatches" -eq 0 ]
