#!/usr/bin/env bash
# cli_checks.sh CASE SWITCHYARD: command-line checks that need a shell. Prints "PASS: ..." or
# "FAIL: ...".
#   help_ranges   no command's --help shows CLI11's unbounded ranges (POSITIVE, NONNEGATIVE, or
#                 the largest double), so every numeric flag has a range people read
#   block_size_0  `bench store --block-size 0` is a clear error, not a SIGFPE, and leaves no file
#   store_json    `bench store --json` prints its rows as JSON alone on stdout
set -uo pipefail
case_name=$1 bin=$2
case $case_name in
help_ranges)
  for command in train generate tokenize train-predictor tune-io selftest "bench store" \
                 "bench cache" "bench decode" "bench infer"; do
    # shellcheck disable=SC2086  # "bench store" is two words
    help=$("$bin" $command --help) || { echo "FAIL: $command --help"; exit 1; }
    if grep -E 'POSITIVE|NONNEGATIVE|1797693' <<<"$help"; then
      echo "FAIL: $command --help shows an unbounded range"
      exit 1
    fi
  done
  echo "PASS: every command's numeric flags show a range people read"
  ;;
block_size_0)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/sy_cli_checks.XXXXXX") || exit 1
  trap 'rm -rf "$dir"' EXIT
  "$bin" bench store --path "$dir" --fio '' --sizes 4M --bytes 8M --fs posix --block-size 0 \
    >"$dir.out" 2>&1
  rc=$?
  cat "$dir.out"
  grep -q "error: InvalidArgument: bench store: --block-size 0 must be a positive multiple of 4 KiB" \
    "$dir.out" || { rm -f "$dir.out"; echo "FAIL: no clear error (exit $rc)"; exit 1; }
  rm -f "$dir.out"
  [[ $rc -eq 1 ]] || { echo "FAIL: exit status $rc (want 1)"; exit 1; }
  [[ -z $(ls -A "$dir") ]] || { echo "FAIL: files left in --path: $(ls -A "$dir")"; exit 1; }
  echo "PASS: --block-size 0 is a clear error and leaves nothing behind"
  ;;
store_json)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/sy_cli_checks.XXXXXX") || exit 1
  trap 'rm -rf "$dir" "$dir.json"' EXIT
  "$bin" bench store --path "$dir" --fio '' --sizes 4M --bytes 8M --fs posix --json \
    >"$dir.json" || { echo "FAIL: bench store --json exited $?"; exit 1; }
  /usr/bin/python3 - "$dir.json" <<'PY' || exit 1
import json, sys
report = json.load(open(sys.argv[1]))
rows = report["rows"]
ok = (len(rows) == 4 and {(r["op"], r["pattern"]) for r in rows} ==
      {("read", "seq"), ("read", "rand"), ("write", "seq"), ("write", "rand")} and
      all(r["gbps"] > 0 and r["extent_bytes"] == 4 << 20 for r in rows))
print(("PASS: " if ok else "FAIL: ") + f"bench store --json: {len(rows)} rows, {rows[:1]}")
sys.exit(0 if ok else 1)
PY
  ;;
*)
  echo "FAIL: unknown case $case_name"
  exit 1
  ;;
esac
