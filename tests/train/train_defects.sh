#!/usr/bin/env bash
# train_defects.sh CASE SWITCHYARD CONFIG: `switchyard train` end to end on the defects of issue 20,
# one CASE per ctest. Each prints "PASS: ..." or "FAIL: ...".
#   save_fails  a checkpoint that cannot be written (file size limit, SIGXFSZ ignored): exit 1
#               with one error line, HDF5's dump only under --verbose, the previous checkpoint
#               intact, no crash and no temporary file left
#   sigterm     SIGTERM mid-run: the step finishes, a checkpoint is written, it says so, exit 0;
#               --resume continues from there; a second signal ends the run at once; SIGINT
#               (Ctrl-C) stops the same way
#   lock        a second run on the same checkpoint.dir is refused, naming the first's pid
#   too_big     sizes no machine holds (batch 2^40, seq_len 2^24) fail fast and cleanly, naming
#               the key
#   resume_from --resume-from FILE resumes from that file
#   generate_context  `generate --max-tokens 1000000` on a model trained on 16 tokens is bounded by
#               that context, with a note
#   token_line  generate's stdout and stderr on one stream (as in a terminal): the token line is
#               finished, with its newline, before the statistics are written (defect 7)
set -uo pipefail
case_name=$1 bin=$2 config=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/sy_train_defects.XXXXXX") || exit 1
jobs_to_kill=()
cleanup() {
  for pid in "${jobs_to_kill[@]}"; do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

train() {  # train ARGS...: the tiny config, quiet progress, checkpoints in $dir/ckpt
  "$bin" train --config "$config" --set train.eval_every=0 --set train.eval_batches=1 \
    --set checkpoint.dir="$dir/ckpt" --set log.progress=lines "$@"
}
# Runs `train ARGS...` in the background, as the process $! names (so signals reach switchyard).
train_in_background() {
  local out=$1
  shift
  (exec "$bin" train --config "$config" --set train.eval_every=0 --set train.eval_batches=1 \
     --set checkpoint.dir="$dir/ckpt" --set log.progress=lines "$@" >"$out" 2>&1) &
}

# Waits (at most 60 s) until FILE has a line matching PATTERN while process PID runs.
wait_for() {
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 600); do
    grep -qE "$pattern" "$file" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# stop_by_signal SIG DIR: a run on checkpoint.dir $dir/DIR gets SIG after step 3; it must finish
# the step, write its checkpoint, say so, acknowledge the signal and exit 0. Sets stopped_step.
stop_by_signal() {
  local sig=$1 ckpt_dir=$dir/$2 out=$dir/$2.txt pid rc line
  train_in_background "$out" --set train.steps=100000 --set log.every=1 \
    --set checkpoint.dir="$ckpt_dir"
  pid=$!
  jobs_to_kill+=("$pid")
  wait_for "$out" "^step 3/" "$pid" || fail "no progress: $(cat "$out")"
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  cat "$out"
  [[ $rc -eq 0 ]] || fail "exit status $rc after SIG$sig (want 0)"
  line=$(grep -E "^stopped by SIG$sig at step [0-9]+; continue with --resume$" "$out") ||
    fail "no line saying the run stopped after SIG$sig"
  stopped_step=$(echo "$line" | sed -E 's/.* step ([0-9]+);.*/\1/')
  [[ -s $(printf '%s/step-%08d.h5' "$ckpt_dir" "$stopped_step") ]] ||
    fail "no checkpoint after SIG$sig"
  grep -q "received SIG$sig" "$out" || fail "SIG$sig was not acknowledged"
}

case $case_name in
save_fails)
  train --set train.steps=2 >"$dir/first.txt" 2>&1 || fail "first run: $(cat "$dir/first.txt")"
  ckpt="$dir/ckpt/step-00000002.h5"
  size=$(stat -c %s "$ckpt")
  cp "$ckpt" "$dir/before.h5"
  # Room for half a checkpoint: the save of step 4 fails part way.
  limit_kib=$(( size / 2 / 1024 ))
  for verbose in "" --verbose; do
    (trap '' XFSZ; ulimit -f "$limit_kib"; train --set train.steps=4 --resume $verbose) \
      >"$dir/out.txt" 2>"$dir/err.txt"
    rc=$?
    cat "$dir/out.txt" "$dir/err.txt"
    [[ $rc -eq 1 ]] || fail "exit status $rc with $verbose (want 1: a clean error, no crash)"
    grep -q "the previous file is untouched\|cannot be written" "$dir/err.txt" ||
      fail "no clear error"
    errors=$(grep -c '^error:' "$dir/err.txt")
    [[ $errors -eq 1 ]] || fail "$errors error lines"
    if [[ -z $verbose ]]; then
      [[ $(wc -l <"$dir/err.txt") -eq 1 ]] || fail "more than one line on stderr"
      grep -q "bytes actually written\|buf = 0x" "$dir/err.txt" && fail "HDF5's dump without --verbose"
      grep -q "File too large" "$dir/err.txt" || fail "the reason (File too large) is missing"
    else
      grep -q "HDF5 error stack" "$dir/err.txt" || fail "--verbose does not show HDF5's stack"
    fi
    cmp -s "$ckpt" "$dir/before.h5" || fail "the previous checkpoint changed"
    ls "$dir/ckpt" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$dir/ckpt")"
  done
  # Without the limit the run resumes from the intact checkpoint and saves.
  train --set train.steps=4 --resume >"$dir/out.txt" 2>&1 || fail "resume: $(cat "$dir/out.txt")"
  grep -q "resumed from $ckpt at step 2" "$dir/out.txt" || fail "$(cat "$dir/out.txt")"
  echo "PASS: a failed save is one clean error line; the previous checkpoint is intact"
  ;;
sigterm)
  stop_by_signal TERM ckpt
  step=$stopped_step
  ckpt=$(printf '%s/ckpt/step-%08d.h5' "$dir" "$step")
  train --set train.steps=$((step + 2)) --resume >"$dir/resume.txt" 2>&1 ||
    fail "resume: $(cat "$dir/resume.txt")"
  grep -q "resumed from $ckpt at step $step" "$dir/resume.txt" || fail "$(cat "$dir/resume.txt")"
  # Two signals: the second ends the run at once, by the signal. Steps of about a second, so
  # that the second signal lands in the step the first one lets finish.
  train_in_background "$dir/out2.txt" --set train.steps=100000 --set log.every=1 \
    --set checkpoint.dir="$dir/ckpt2" --set data.batch_size=2048
  pid=$!
  jobs_to_kill+=("$pid")
  wait_for "$dir/out2.txt" "^step 1/" "$pid" || fail "no progress: $(cat "$dir/out2.txt")"
  kill -TERM "$pid"
  wait_for "$dir/out2.txt" "received SIGTERM" "$pid" || fail "no answer: $(cat "$dir/out2.txt")"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [[ $rc -eq 143 ]] || fail "exit status $rc after two SIGTERMs (want 143: killed by the second)"
  # SIGINT (Ctrl-C) stops like SIGTERM. A background job of a script starts with SIGINT ignored;
  # switchyard installs its own handler over that.
  stop_by_signal INT ckpt3
  echo "PASS: SIGTERM stops after the step with checkpoint $ckpt; a second one ends it at once;" \
    "SIGINT stops like SIGTERM"
  ;;
lock)
  train_in_background "$dir/first.txt" --set train.steps=100000 --set log.every=1
  pid=$!
  jobs_to_kill+=("$pid")
  wait_for "$dir/first.txt" "^step 1/" "$pid" || fail "no progress: $(cat "$dir/first.txt")"
  train --set train.steps=2 --set train.seed=7 >"$dir/second.txt" 2>&1
  rc=$?
  cat "$dir/second.txt"
  kill -TERM "$pid"
  wait "$pid"
  [[ $rc -eq 1 ]] || fail "the second run exited $rc (want 1)"
  grep -q "is locked by pid $pid on host $(hostname) since " "$dir/second.txt" ||
    fail "the refusal does not name the first run (pid $pid)"
  echo "PASS: a second run on the same checkpoint.dir is refused, naming pid $pid"
  ;;
too_big)
  for set in data.batch_size=1099511627776 data.batch_size=100000000 data.seq_len=16777216; do
    key=${set%%=*}
    start=$(date +%s)
    train --set train.steps=1 --set "$set" >"$dir/out.txt" 2>&1
    rc=$?
    seconds=$(( $(date +%s) - start ))
    cat "$dir/out.txt"
    [[ $rc -eq 1 ]] || fail "$set: exit status $rc (want 1)"
    grep -q "^error: ResourceExhausted: .*lower $key" "$dir/out.txt" || fail "$set: no clear error"
    (( seconds <= 10 )) || fail "$set: $seconds s before the error"
  done
  echo "PASS: sizes that cannot fit fail at once, naming the key"
  ;;
resume_from)
  train --set train.steps=4 --set checkpoint.every=2 >"$dir/out.txt" 2>&1 ||
    fail "$(cat "$dir/out.txt")"
  from="$dir/ckpt/step-00000002.h5"
  train --set train.steps=3 --resume-from "$from" >"$dir/out.txt" 2>&1 ||
    fail "$(cat "$dir/out.txt")"
  cat "$dir/out.txt"
  grep -q "resumed from $from at step 2" "$dir/out.txt" || fail "not resumed from $from"
  grep -q "^final step 3 " "$dir/out.txt" || fail "no final step 3"
  echo "PASS: --resume-from resumes from the named file"
  ;;
generate_context)
  train --set train.steps=2 >"$dir/out.txt" 2>&1 || fail "$(cat "$dir/out.txt")"
  "$bin" generate --model "$dir/ckpt" --prompt-ids 8,16,1 --max-tokens 1000000 \
    >"$dir/tokens.txt" 2>"$dir/err.txt" || fail "generate: $(cat "$dir/err.txt")"
  cat "$dir/tokens.txt" "$dir/err.txt"
  grep -q "^note: generating at most 13 tokens, not --max-tokens 1000000: the model's context is 16 tokens and the prompt holds 3$" \
    "$dir/err.txt" || fail "no note on the bound"
  count=$(tr ',' '\n' <"$dir/tokens.txt" | grep -c .)
  (( count <= 13 )) || fail "$count tokens generated past the context"
  # A prompt past the context is warned about (and still answered, one token).
  prompt=8$(printf ',16%.0s' $(seq 16))
  "$bin" generate --model "$dir/ckpt" --prompt-ids "$prompt" --max-tokens 4 \
    >"$dir/tokens.txt" 2>"$dir/err.txt" || fail "generate: $(cat "$dir/err.txt")"
  cat "$dir/err.txt"
  grep -q "^warning: the prompt holds 17 tokens, past the 16 the model was made for" \
    "$dir/err.txt" || fail "no warning for a prompt past the context"
  echo "PASS: --max-tokens is bounded by the model's context, and says so"
  ;;
token_line)
  train --set train.steps=2 >"$dir/out.txt" 2>&1 || fail "$(cat "$dir/out.txt")"
  # One stream for both, written in the order the process writes (stdout is flushed per token).
  "$bin" generate --model "$dir/ckpt" --prompt-ids 8,16,1 --max-tokens 5 >"$dir/both.txt" 2>&1 ||
    fail "generate: $(cat "$dir/both.txt")"
  cat "$dir/both.txt"
  # The token line stands alone: five ids and nothing else, and each statistics line starts a line.
  grep -qE '^[0-9]+(,[0-9]+){4}$' "$dir/both.txt" || fail "no token line of its own"
  grep -qE '^prefill: ' "$dir/both.txt" || fail "the prefill statistics do not start a line"
  grep -qE '^experts \(' "$dir/both.txt" || fail "the expert statistics do not start a line"
  tokens=$(grep -nE '^[0-9]+(,[0-9]+){4}$' "$dir/both.txt" | cut -d: -f1)
  stats=$(grep -nE '^prefill: ' "$dir/both.txt" | cut -d: -f1)
  (( tokens < stats )) || fail "the statistics come before the token line"
  echo "PASS: the token line is finished before the statistics"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
