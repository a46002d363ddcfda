#!/usr/bin/env bash
# Runs the storage benchmarks and prints them with the machine they ran on, as Markdown:
#   1. switchyard tune-io      block size x queue depth sweep (io_uring, O_DIRECT)
#   2. switchyard bench store  expert extents via posix / io_uring / pmem beside fio, same file
#   3. switchyard bench cache  MoESys LFU / LRU / W-TinyLFU hit rates vs Belady on Zipf traces
#
#   benchmarks/storage/run_storage_bench.sh DIR [OUTPUT.md]
#
# DIR must be on the device to measure (a real block device, not tmpfs: O_DIRECT). The scratch
# files (about 2 x BYTES per extent size, 1 GiB by default) are removed afterwards.
# Environment: SWITCHYARD (the binary, default build/switchyard), BYTES (data per extent size,
# default 512M), REPEATS (runs per row, median reported, default 3), SIZES (default 4M,16M,64M),
# BLOCK (the io_uring block size of bench store, default 64M, the library's default: each extent
# up to 64 MiB goes to the kernel as one request, as fio's bs=extent does, and the block layer
# splits it at max_sectors_kb; `switchyard tune-io` prints the best one for the disk at hand).
# The load average is printed before and after: other work on the machine disturbs the numbers.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  sed -n '2,17p' "$0"
  exit 2
fi
dir=$1
out=${2:-/dev/stdout}
switchyard=${SWITCHYARD:-build/switchyard}
bytes=${BYTES:-512M}
repeats=${REPEATS:-3}
sizes=${SIZES:-4M,16M,64M}
block=${BLOCK:-64M}

if [[ ! -x $switchyard ]]; then
  echo "error: $switchyard is not built; build the switchyard target or set SWITCHYARD" >&2
  exit 1
fi
if ! command -v fio >/dev/null 2>&1; then
  echo "error: fio is not installed (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mkdir -p "$dir"
if [[ $(findmnt -n -o FSTYPE -T "$dir" | head -1) == tmpfs ]]; then
  echo "error: $dir is on tmpfs (no O_DIRECT, no device): give a directory on a real disk" >&2
  exit 1
fi
source_dev=$(findmnt -n -o SOURCE -T "$dir" | head -1)
disk=$(lsblk -n -o PKNAME "$source_dev" 2>/dev/null | head -1)
disk=${disk:-$(basename "$source_dev")}

{
  echo "## Machine"
  echo
  echo '```'
  echo "date:        $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "kernel:      $(uname -r)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Socket\(s\)|NUMA node\(s\)):'
  echo "memory:      $(free -g | awk '/Mem:/ {print $2 " GiB"}')"
  echo
  df -h "$dir"
  findmnt -T "$dir"
  lsblk -d -o NAME,SIZE,ROTA,TYPE,MODEL "/dev/$disk" 2>/dev/null || true
  for f in scheduler max_sectors_kb logical_block_size rotational; do
    [[ -r /sys/block/$disk/queue/$f ]] && echo "queue/$f: $(cat "/sys/block/$disk/queue/$f")"
  done
  echo "fio:         $(fio --version)"
  echo "load before: $(uptime)"
  echo '```'
  echo
  echo "## tune-io"
  echo
  echo '```'
  "$switchyard" tune-io --path "$dir"
  echo '```'
  echo
  echo "## bench store (BYTES=$bytes per size, median of $repeats, io_uring block $block)"
  echo
  echo '```'
  "$switchyard" bench store --path "$dir" --sizes "$sizes" --bytes "$bytes" --repeats "$repeats" \
    --block-size "$block"
  echo '```'
  echo
  echo "## bench cache"
  echo
  echo '```'
  "$switchyard" bench cache
  echo '```'
  echo
  echo "load after: $(uptime)"
} | tee "$out"
