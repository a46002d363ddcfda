#!/usr/bin/env bash
# Builds every libFuzzer target with clang (ASan+UBSan) and runs each, starting from its checked-in
# seed corpus (fuzz/<area>/corpus/), for FUZZ_RUNS executions (default 10000000) or FUZZ_SECONDS
# seconds when that is set. Fails if a fuzzer finds a crash; the crashing input and the whole log
# stay under $build_dir/fuzz-artifacts/<target>/ (turn each into a regression test).
# Prints one line per target (executions, coverage edges and features, seconds) and writes them to
# $build_dir/fuzz-campaign.txt for docs/reliability.md. ONLY=REGEX runs just the matching targets.
# scripts/fuzz-smoke.sh is this with a few seconds per target. FUZZ_JOBS targets run at once
# (default: the number of cores), each a single-threaded libFuzzer process.
# FUZZ_CORPUS_DIR=DIR keeps each target's working corpus in DIR/<target> (seeded from the checked-in
# corpus on first use) instead of a temporary directory, so a campaign can run in pieces, as
# ClusterFuzz runs its sessions: each piece starts from everything the earlier ones found, and
# DIR/<target>.executions keeps one line per piece; the report adds them up. A piece stopped with
# SIGINT (libFuzzer prints its final statistics then) counts what it ran. Without FUZZ_RUNS or
# FUZZ_SECONDS a piece runs what its target still lacks of the campaign's goal (FUZZ_GOAL, default
# 10000000 executions on its corpus), and a target already there is skipped. After each piece the
# corpus is minimized (libFuzzer's -merge=1: the smallest subset with the same coverage features).
# FUZZ_CORPUS_DIR=fuzz/campaign keeps the corpora and ledgers in the checkout: committed, they carry
# a campaign from one machine to the next (fuzz/campaign/README.md). FUZZ_FORK=N runs each target
# in libFuzzer's fork mode, N processes on one corpus (a slow target on all cores); such a piece
# ends at FUZZ_RUNS, FUZZ_SECONDS or its goal, not at SIGINT, and counts the executions its last
# status line reports.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
goal=${FUZZ_GOAL:-10000000}
runs=${FUZZ_RUNS:-}
seconds=${FUZZ_SECONDS:-}
corpus_root=${FUZZ_CORPUS_DIR:-}
[ -z "$runs" ] && [ -z "$corpus_root" ] && runs=$goal
# -O1 with line tables, as libFuzzer's documentation builds: fast to compile, crash reports with
# file:line.
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DSY_BUILD_FUZZERS=ON -DSY_BUILD_TESTS=OFF -DSY_BUILD_BENCHMARKS=OFF -DSY_ENABLE_CUDA=OFF \
  -DSY_NATIVE=ON >/dev/null
mapfile -t fuzzers < <(find fuzz -mindepth 2 -name '*_fuzzer.cc' -exec basename {} .cc \; | sort |
                       grep -E "${ONLY:-.}")
if [ ${#fuzzers[@]} -eq 0 ]; then
  echo "fuzz-campaign: no fuzz targets"
  exit 0
fi
cmake --build "$build_dir" -j "$(nproc)" --target "${fuzzers[@]}"
built_at=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)  # the ledger's commit column
report="$build_dir/fuzz-campaign.txt"
: >"$report"
# executions_on_corpus LEDGER: the executions its pieces add up to (0 without a ledger).
executions_on_corpus() { [ -f "$1" ] && awk '{ n += $2 } END { print n + 0 }' "$1" || echo 0; }
run_target() {
  local f=$1 src corpus_seed work artifacts exe t0 rc stopped execs cov line total ledger limit
  local before after merged
  local fork=()
  [ -n "${FUZZ_FORK:-}" ] && fork=(-fork="$FUZZ_FORK")
  src=$(find fuzz -name "$f.cc" | head -1)
  corpus_seed="$(dirname "$src")/corpus"
  if [ -n "$seconds" ]; then
    limit=(-max_total_time="$seconds")
  elif [ -n "$runs" ]; then
    limit=(-runs="$runs")
  else  # the rest of the goal on this corpus (runs is only empty with a corpus directory)
    ledger="$corpus_root/$f.executions"
    total=$(executions_on_corpus "$ledger")
    if [ "$total" -ge "$goal" ]; then
      echo "$f: already at $total executions over $(wc -l <"$ledger") pieces on this corpus" \
        "(goal $goal), skipped" | tee -a "$report"
      return 0
    fi
    limit=(-runs=$((goal - total)))
  fi
  if [ -n "$corpus_root" ]; then
    work="$corpus_root/$f"
    mkdir -p "$work"
    if [ -z "$(ls -A "$work")" ] && [ -d "$corpus_seed" ]; then cp -r "$corpus_seed/." "$work/"; fi
  else
    work=$(mktemp -d)
    [ -d "$corpus_seed" ] && cp -r "$corpus_seed/." "$work/"
  fi
  artifacts="$build_dir/fuzz-artifacts/$f"
  mkdir -p "$artifacts"
  exe=$(find "$build_dir/fuzz" -type f -name "$f" -perm -u+x | head -1)
  if [ -z "$exe" ]; then
    echo "fuzz-campaign: $f was not built under $build_dir/fuzz (is it in a CMakeLists.txt?)"
    return 1
  fi
  echo "fuzz-campaign: $f (${limit[*]}, seeds: $(ls "$work" | wc -l))"
  t0=$(date +%s)
  rc=0
  "$exe" "${fork[@]}" "${limit[@]}" -print_final_stats=1 -artifact_prefix="$artifacts/" "$work" \
    >"$artifacts/log" 2>&1 || rc=$?
  # 72 is libFuzzer's exit code for a run stopped by SIGINT or SIGTERM (-interrupted_exitcode).
  stopped=""
  [ "$rc" -eq 72 ] && stopped=" (stopped by a signal)"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 72 ]; then
    tail -n 60 "$artifacts/log"
    echo "fuzz-campaign: $f FAILED; the input and the full log are in $artifacts/"
    [ -z "$corpus_root" ] && rm -rf "$work"
    return 1
  fi
  if [ ${#fork[@]} -eq 0 ]; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$artifacts/log" | grep -o '[0-9]*$')
  else  # the fork mode's parent prints no final statistics; its status lines count every child
    execs=$(grep -oE '^#[0-9]+:' "$artifacts/log" | tail -1 | tr -d '#:')
    execs=${execs:-0}
  fi
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$artifacts/log" | tail -1)
  line="$f: $execs executions$stopped, $cov, $(( $(date +%s) - t0 ))s, 0 crashes"
  if [ -n "$corpus_root" ]; then
    echo "$(date -u +%FT%TZ) $execs $built_at" >>"$corpus_root/$f.executions"
    total=$(executions_on_corpus "$corpus_root/$f.executions")
    line="$line; $total executions over $(wc -l <"$corpus_root/$f.executions") pieces on this corpus"
    # Minimize: a merge into an empty directory keeps the inputs that add coverage features.
    before=$(ls "$work" | wc -l)
    rm -rf "$work.min"
    mkdir "$work.min"
    if "$exe" -merge=1 -artifact_prefix="$artifacts/" "$work.min" "$work" >"$artifacts/merge.log" 2>&1 &&
       [ -n "$(ls -A "$work.min")" ]; then
      rm -rf "$work"
      mv "$work.min" "$work"
    else
      rm -rf "$work.min"
      echo "fuzz-campaign: $f: the corpus was not minimized (see $artifacts/merge.log)"
    fi
    after=$(ls "$work" | wc -l)
    line="$line; corpus $before -> $after inputs"
    # The minimized corpus's coverage, the same measure in fork mode as out of it.
    merged=$(grep -oE '[0-9]+ new features added; [0-9]+ new coverage edges' \
               "$artifacts/merge.log" | tail -1 || true)
    [ -n "$merged" ] && line="$line ($(awk '{ print $5 " edges / " $1 " features" }' <<<"$merged"))"
  else
    rm -rf "$work"
  fi
  echo "$line" | tee -a "$report"
}

# FUZZ_JOBS targets at a time; each target's outcome lands in $status_dir, read once all are done.
parallel=${FUZZ_JOBS:-$(nproc)}
status_dir=$(mktemp -d)
for f in "${fuzzers[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  (if run_target "$f"; then touch "$status_dir/$f.ok"; fi) &
done
wait
failed=0
for f in "${fuzzers[@]}"; do
  [ -e "$status_dir/$f.ok" ] || failed=1
done
rm -rf "$status_dir"
exit "$failed"
