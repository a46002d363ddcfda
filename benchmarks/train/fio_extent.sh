#!/usr/bin/env bash
# fio random reads and writes of one expert extent on the disk of DIR (io_uring, O_DIRECT,
# iodepth 4: the store's access pattern), for the store benchmarks to set their MB/s beside.
# Prints "READ_MB/s WRITE_MB/s". Writes SIZE of scratch under DIR/fio and deletes it.
#
#   benchmarks/train/fio_extent.sh DIR EXTENT_BYTES [SIZE (1G)] [RUNTIME_S (10)]
set -euo pipefail
dir=$1/fio
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
args=(--directory="$dir" --ioengine=io_uring --direct=1 --bs="$2" --iodepth=4 --size="${3:-1G}"
      --runtime="${4:-10}" --time_based --output-format=json)
bw() { /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['$1']['bw_bytes']/1e6)"; }
r=$(fio --name=r --rw=randread "${args[@]}" | bw read)
w=$(fio --name=w --rw=randwrite --end_fsync=1 "${args[@]}" | bw write)
echo "$r $w"
