#!/usr/bin/env bash
# Every failure point of the durable operations, in full (ctest runs a sample): the store's
# creation, write-back and commit through the fault-injection file system
# (tests/reliability/failure_points_test.cc), and a checkpoint save by the real binary at every
# write, fsync and rename (tests/reliability/process_failure_points.py --stride 1, through
# fault_shim), and the outputs of `switchyard convert` (hf, gguf, native) and tune-io's file at
# every write, flush, fsync and rename (tests/reliability/output_failure_points.py --stride 1).
# Prints the counts that docs/reliability.md records.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake --build "$build" --target switchyard sy_fault_shim reliability_failure_points_test
"$build"/tests/reliability/reliability_failure_points_test 2>/dev/null |
  grep -E '^\[ .*failure points|PASSED|FAILED'
/usr/bin/python3 tests/reliability/process_failure_points.py "$build/switchyard" \
  "$build/tests/reliability/libsy_fault_shim.so" "$build/failure-points" --stride 1
/usr/bin/python3 tests/reliability/output_failure_points.py "$build/switchyard" \
  "$build/tests/reliability/libsy_fault_shim.so" "$build/output-failure-points" --stride 1
