#!/usr/bin/env bash
# Pontoon's main job: installs what it needs, builds in release mode, and
# measures the device store against the raw disk on this machine.
# Arguments are passed to `pontoon store-bench` (default: a 2 GiB store, 5 s per test).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh demo
cargo build --release -p pontoon
dir=$(mktemp -d "${TMPDIR:-/var/tmp}/pontoon-demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
./target/release/pontoon store-bench --path "$dir/store.img" --size 2G --runtime 5s "$@"
