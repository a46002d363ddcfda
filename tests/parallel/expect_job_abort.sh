#!/usr/bin/env bash
# expect_job_abort.sh LIMIT_SECONDS PATTERN -- COMMAND...
# Passes when COMMAND (an mpirun job) exits non-zero within LIMIT_SECONDS and its output matches
# the extended regex PATTERN. Fails when it succeeds, hangs past the limit, or says something else.
set -uo pipefail
limit=$1
pattern=$2
shift 2
[[ "${1:-}" == "--" ]] && shift
output=$(mktemp)
trap 'rm -f "$output"' EXIT
start_ns=$(date +%s%N)
timeout --kill-after=5 "$limit" "$@" >"$output" 2>&1
status=$?
elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
elapsed="$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))"
cat "$output"
echo "--- exit status $status after ${elapsed}s (limit ${limit}s)"
if [[ $status -eq 124 || $status -eq 137 ]]; then
  echo "FAIL: the job did not end within ${limit}s (hung)"
  exit 1
fi
if [[ $status -eq 0 ]]; then
  echo "FAIL: the job exited 0 but was expected to abort"
  exit 1
fi
if ! grep -Eq "$pattern" "$output"; then
  echo "FAIL: the output does not match /$pattern/"
  exit 1
fi
echo "PASS: aborted with status $status in ${elapsed}s"
