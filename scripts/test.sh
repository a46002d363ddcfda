#!/usr/bin/env bash
# Builds Switchyard and runs every test with ctest (unit, oracle, MPI and end-to-end tests).
# This is the README's test command; .ci/run calls it after installing the dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" --timeout 900
