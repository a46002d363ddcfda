#!/usr/bin/env bash
# The fuzz smoke run of CI: scripts/fuzz-campaign.sh for FUZZ_SECONDS (default 20) per target.
# Fails if a fuzzer finds a crash.
set -euo pipefail
FUZZ_SECONDS=${FUZZ_SECONDS:-20} exec "$(dirname "$0")/fuzz-campaign.sh" "$@"
