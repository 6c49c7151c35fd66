#!/usr/bin/env bash
# What the binary protocol's wire modes cost one connection, side by side
# in one run: 4 KiB reads and writes at QD32 and QD1 over loopback in modes
# none, authenticated and secure (crates/net/examples/auth_bench.rs; the
# modes alternate round by round). Prints calls/s, ratio to mode none,
# CPU µs per call on the client and server threads, the added µs and heap
# allocations per call. Then the cost of sealing and opening one frame
# without sockets.
#
# Cluster-level figures (bench/cluster.sh per mode) need the OSD and the
# client library to pass keys: see crates/net/src/auth.rs.
#
# Usage: bench/net-auth.sh [--time 3] [--rounds 5]
set -euo pipefail
cd "$(dirname "$0")/.."
time=3; rounds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time="${2%s}"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    *) echo "usage: $0 [--time 3] [--rounds 5]" >&2; exit 2 ;;
  esac
done
echo "== CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "aes: $(grep -qw aes /proc/cpuinfo && echo yes || echo no)," \
  "vaes: $(grep -qw vaes /proc/cpuinfo && echo yes || echo no);" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --release -p pontoon-net --example auth_bench 2>&1 | tail -1
target/release/examples/auth_bench "$time" "$rounds"
echo
echo "== seal + open of one frame, no sockets"
cargo test --release -p pontoon-net --lib seal_and_open_cost_per_frame -- --ignored --nocapture 2>&1 \
  | grep 'ns per frame'
