#!/bin/sh
# Usage: train_e2e.sh SWITCHYARD CONFIG. Trains 40 steps in a temp dir; checks that the final
# checkpoint and the metrics file appear; prints "e2e: checkpoint ok" and then the run's final line.
set -u
bin="$1"
config="$2"
dir=$(mktemp -d "${TMPDIR:-/tmp}/sy_train_e2e.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
"$bin" train --config "$config" --set train.steps=40 --set train.eval_every=0 \
  --set checkpoint.dir="$dir/ckpt" --set checkpoint.every=20 --set log.metrics="$dir/m.jsonl" \
  --set log.progress=lines > "$dir/out.txt" 2>&1
rc=$?
cat "$dir/out.txt" >&2
if [ $rc -ne 0 ]; then echo "e2e: FAIL (exit $rc)"; exit 1; fi
if [ ! -s "$dir/ckpt/step-00000040.h5" ] || [ ! -s "$dir/ckpt/step-00000020.h5" ]; then
  echo "e2e: FAIL (no checkpoint in $dir/ckpt)"; exit 1
fi
if ! grep -q '"expert_load"' "$dir/m.jsonl"; then echo "e2e: FAIL (no metrics)"; exit 1; fi
if ! /usr/bin/python3 "$(dirname "$0")/check_checkpoint.py" "$dir/ckpt/step-00000040.h5" 40; then
  echo "e2e: FAIL (checkpoint layout, read with h5py)"; exit 1
fi
echo "e2e: checkpoint ok"
tail -n 1 "$dir/out.txt"
