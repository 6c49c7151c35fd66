#!/usr/bin/env bash
# Every table of docs/benchmarks.md in one run: the device store against the
# raw disk, then the 3-OSD cluster (client library and NBD) against the raw
# disk and the Ceph baseline. Pass --ceph to also run the Ceph baseline
# (../shared/bench/ceph-baseline/run.sh, about 8 minutes) right after, on
# the same machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bench/store.sh
bench/cluster.sh "$@"
