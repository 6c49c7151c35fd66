#!/usr/bin/env bash
# Cluster benchmark: a local 3-OSD cluster (`pontoon up`), pools of size 1
# and 3, 4 KiB random read and write at QD1 and QD32 through the client
# library (`pontoon bench`), beside raw fio on the same filesystem, with
# ratios against raw and against the Ceph 16.2 baseline measured on this
# kind of machine (../shared/bench/ceph-baseline/RESULTS.md).
#
# Usage: bench/cluster.sh [--time 10s] [--dir DIR] [--ceph]
#   --ceph   also run ../shared/bench/ceph-baseline/run.sh right after (about 8 min)
set -euo pipefail
cd "$(dirname "$0")/.."
time=10s; dir=""; ceph=0
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --ceph) ceph=1; shift ;;
    *) echo "usage: $0 [--time 10s] [--dir DIR] [--ceph]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
cargo build --release -p pontoon 2>&1 | tail -1
P=$PWD/target/release/pontoon
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-bench.XXXXXX)
mkdir -p "$dir"
out="$dir/results"; mkdir -p "$out"
up_pid=""
cleanup() { [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null; true; }
trap cleanup EXIT

echo "== raw fio on $(df --output=target "$dir" | tail -1) (2 GiB file, 4k, io_uring, direct=1)"
raw="$dir/raw.fio"
fio --name=layout --filename="$raw" --size=2G --rw=write --bs=1M --ioengine=io_uring --direct=1 --iodepth=8 --output=/dev/null
rawfio() { # name rw qd extra...
  local name=$1 rw=$2 qd=$3; shift 3
  fio --name=raw --filename="$raw" --size=2G --ioengine=io_uring --direct=1 --rw="$rw" --bs=4k \
      --iodepth="$qd" --norandommap --randrepeat=0 --time_based --runtime="$time" "$@" \
      --output-format=json --output="$out/raw-$name.json"
}
rawfio randread-qd1 randread 1
rawfio randread-qd32 randread 32
rawfio randwrite-qd1 randwrite 1 --sync=dsync
rawfio randwrite-qd32 randwrite 32 --sync=dsync
rm -f "$raw"

echo "== pontoon up: 3 OSDs of 4 GiB, 1 shard each"
"$P" up --dir "$dir/cluster" --osds 3 --osd-size 4G --shards 1 > "$dir/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 1 240); do [ -f "$dir/cluster/cluster.toml" ] && break; sleep 0.5; done
[ -f "$dir/cluster/cluster.toml" ] || { echo "cluster did not start; see $dir/up.log" >&2; exit 1; }
C=(--cluster "$dir/cluster")
"$P" pool create size1 --size 1 --min-size 1 --pgs 64 --failure-domain osd "${C[@]}"
"$P" pool create size3 --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}"
"$P" volume create v1 --size 2G --pool size1 "${C[@]}"
"$P" volume create v3 --size 2G --pool size3 "${C[@]}"
echo "== prefilling both volumes (sequential 1 MiB writes), so reads hit data"
for v in v1 v3; do
  "$P" bench --volume "$v" --fill --bs 4M --qd 4 "${C[@]}"
done
for pool in 1 3; do
  for t in randwrite-qd1 randwrite-qd32 randread-qd1 randread-qd32; do
    rw=${t%-qd*}; qd=${t#*-qd}
    echo "== size$pool $t"
    "$P" bench --volume "v$pool" --rw "$rw" --bs 4k --qd "$qd" --time "$time" --json "${C[@]}" > "$out/size$pool-$t.json"
  done
done
"$P" status "${C[@]}" | head -12
cleanup; up_pid=""

python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
ceph = {  # ../shared/bench/ceph-baseline/RESULTS.md (Ceph 16.2, 3 OSDs, fio rbd, 20 s)
  "size1-randwrite-qd1": (806, 1237.5, 574.1), "size1-randwrite-qd32": (2509, 12749.0, 438.9),
  "size1-randread-qd1": (2834, 351.0, 212.1), "size1-randread-qd32": (9247, 3459.7, 129.8),
  "size3-randwrite-qd1": (436, 2292.1, 2029.4), "size3-randwrite-qd32": (905, 35350.1, 1531.3),
  "size3-randread-qd1": (2569, 387.0, 247.3), "size3-randread-qd32": (8966, 3567.9, 136.8),
}
def raw(name):
    j = json.load(open(os.path.join(out, f"raw-{name}.json")))["jobs"][0]
    side = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
    pct = side["clat_ns"]["percentile"]
    return side["iops"], side["lat_ns"]["mean"]/1000, pct["50.000000"]/1000, pct["99.000000"]/1000, pct["99.900000"]/1000
print()
print("Pontoon cluster (3 OSDs, client library) vs raw fio (same run) and Ceph 16.2 (baseline file)")
print(f"{'test':24} {'IOPS':>8} {'raw IOPS':>9} {'x raw':>6} {'x Ceph':>7} {'mean µs':>8} {'p50':>6} {'p99':>7} {'p99.9':>7} {'raw mean':>8} {'OSD µs/IO':>9} {'Ceph OSD':>8} {'client µs/IO':>12}")
for pool in (1, 3):
    for t in ("randwrite-qd1", "randwrite-qd32", "randread-qd1", "randread-qd32"):
        name = f"size{pool}-{t}"
        r = json.load(open(os.path.join(out, name + ".json")))
        ri = raw(t)
        c = ceph[name]
        osd = r.get("osd_cpu_us_per_io")
        print(f"{name:24} {r['iops']:8.0f} {ri[0]:9.0f} {r['iops']/ri[0]:6.2f} {r['iops']/c[0]:7.1f} {r['mean_us']:8.0f} {r['p50_us']:6.0f} {r['p99_us']:7.0f} {r['p999_us']:7.0f} {ri[1]:8.0f} {osd if osd is None else round(osd,1)!s:>9} {c[2]:8.1f} {r['client_cpu_us_per_io']:12.1f}")
print("raw writes use --sync=dsync (durable, as Pontoon's acknowledged writes are).")
PY
if [ "$ceph" = 1 ]; then
  echo "== Ceph baseline (same machine, right after)"
  ../shared/bench/ceph-baseline/run.sh
fi
