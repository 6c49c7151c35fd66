#!/usr/bin/env bash
# Device-store benchmark: the store against raw fio on the same filesystem
# (4 KiB random read and write, QD1 and QD32), then the start-up time of a
# store holding one million objects. Reproduces the store tables of
# docs/benchmarks.md.
# Usage: bench/store.sh [--dir DIR] [--runtime 10s]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=/var/tmp/pontoon-store-bench; runtime=10s
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --runtime) runtime="$2"; shift 2 ;;
    *) echo "usage: $0 [--dir DIR] [--runtime 10s]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
cargo build --release -p pontoon 2>&1 | tail -1
mkdir -p "$dir"
./target/release/pontoon store-bench --path "$dir/store.img" --size 2G --runtime "$runtime"
./target/release/pontoon store-startup --path "$dir/startup.img" --objects 1000000
