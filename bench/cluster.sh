#!/usr/bin/env bash
# Cluster benchmark: a local 3-OSD cluster (`pontoon up --nbd --nvmf`),
# pools of size 1 and 3, 4 KiB random read and write at QD1 and QD32, first
# through the client library (`pontoon bench`), then through the NBD gateway
# with fio's nbd engine, then through the NVMe/TCP gateway with the Rust test
# initiator (`pontoon bench --nvmf`), beside raw fio on the same filesystem,
# with ratios
# against raw and against the Ceph 16.2 baseline measured on this kind of
# machine (../shared/bench/ceph-baseline/RESULTS.md). CPU per I/O is given
# for the client (or fio), the gateway and the OSDs.
#
# Usage: bench/cluster.sh [--time 10s] [--dir DIR] [--ceph]
#   --ceph   also run ../shared/bench/ceph-baseline/run.sh right after (about 8 min)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
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
cleanup() { [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null; drop_osd_images "$dir"; true; }
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
nbd_port=$(free_port); nvmf_port=$(free_port)
"$P" up --dir "$dir/cluster" --osds 3 --osd-size 4G --shards 1 --nbd 127.0.0.1:$nbd_port \
    --nvmf 127.0.0.1:$nvmf_port > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create size1 --size 1 --min-size 1 --pgs 64 --failure-domain osd "${C[@]}"
"$P" pool create size3 --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}"
"$P" volume create v1 --size 2G --pool size1 "${C[@]}"
"$P" volume create v3 --size 2G --pool size3 "${C[@]}"
host=nqn.2026-11.io.pontoon:bench
for v in v1 v3; do
  nvmf_export "$P" "$host" "$v" "${C[@]}"
done
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
cpu_of() { # total utime+stime seconds of the given pids
  python3 -c '
import os, sys
hz = os.sysconf("SC_CLK_TCK"); t = 0
for p in sys.argv[1:]:
    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    t += (int(f[11]) + int(f[12])) / hz
print(t)' "$@"
}
osd_pids=$(cat "$dir"/cluster/run/osd.*.pid)
nbd_pid=$(cat "$dir/cluster/run/nbd.pid")
for pool in 1 3; do
  for t in randwrite-qd1 randwrite-qd32 randread-qd1 randread-qd32; do
    rw=${t%-qd*}; qd=${t#*-qd}
    echo "== NBD size$pool $t"
    o0=$(cpu_of $osd_pids); g0=$(cpu_of $nbd_pid)
    fio --name=nbd --ioengine=nbd --uri="nbd://127.0.0.1:$nbd_port/v$pool" --size=2G --rw="$rw" --bs=4k \
        --iodepth="$qd" --norandommap --randrepeat=0 --time_based --runtime="$time" \
        --output-format=json --output="$out/nbd-size$pool-$t.json"
    o1=$(cpu_of $osd_pids); g1=$(cpu_of $nbd_pid)
    echo "{\"osd_cpu_s\": $(python3 -c "print($o1-$o0)"), \"gateway_cpu_s\": $(python3 -c "print($g1-$g0)")}" > "$out/nbd-size$pool-$t.cpu.json"
  done
done
for pool in 1 3; do
  for t in randwrite-qd1 randwrite-qd32 randread-qd1 randread-qd32; do
    rw=${t%-qd*}; qd=${t#*-qd}
    echo "== NVMe/TCP size$pool $t"
    "$P" bench --nvmf 127.0.0.1:$nvmf_port --nqn "nqn.2026-11.io.pontoon:v$pool" --hostnqn "$host" \
        --rw "$rw" --bs 4k --qd "$qd" --time "$time" --json "${C[@]}" > "$out/nvmf-size$pool-$t.json"
  done
done
"$P" status "${C[@]}" | head -12
cleanup; up_pid=""
# The OSD files are 12 GiB together; the results stay.
rm -rf "$dir/cluster"
echo "results: $out"

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
print()
print("Through the NBD gateway (fio ioengine=nbd), same cluster")
print(f"{'test':24} {'IOPS':>8} {'x raw':>6} {'x Ceph':>7} {'mean µs':>8} {'p50':>6} {'p99':>7} {'p99.9':>7} {'fio µs/IO':>9} {'gw µs/IO':>8} {'OSD µs/IO':>9}")
for pool in (1, 3):
    for t in ("randwrite-qd1", "randwrite-qd32", "randread-qd1", "randread-qd32"):
        name = f"size{pool}-{t}"
        j = json.load(open(os.path.join(out, f"nbd-{name}.json")))["jobs"][0]
        side = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
        ios = side["total_ios"] or 1
        pct = side["clat_ns"]["percentile"]
        cpu = json.load(open(os.path.join(out, f"nbd-{name}.cpu.json")))
        fio_cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000 / ios * 1e6
        ri = raw(t)
        print(f"{name:24} {side['iops']:8.0f} {side['iops']/ri[0]:6.2f} {side['iops']/ceph[name][0]:7.1f} {side['lat_ns']['mean']/1000:8.0f} {pct['50.000000']/1000:6.0f} {pct['99.000000']/1000:7.0f} {pct['99.900000']/1000:7.0f} {fio_cpu:9.1f} {cpu['gateway_cpu_s']/ios*1e6:8.1f} {cpu['osd_cpu_s']/ios*1e6:9.1f}")
print()
print("Through the NVMe/TCP gateway (Rust test initiator, one I/O queue), same cluster")
print(f"{'test':24} {'IOPS':>8} {'x raw':>6} {'x Ceph':>7} {'mean µs':>8} {'p50':>6} {'p99':>7} {'p99.9':>7} {'host µs/IO':>10} {'gw µs/IO':>8} {'OSD µs/IO':>9}")
for pool in (1, 3):
    for t in ("randwrite-qd1", "randwrite-qd32", "randread-qd1", "randread-qd32"):
        name = f"size{pool}-{t}"
        r = json.load(open(os.path.join(out, f"nvmf-{name}.json")))
        ri = raw(t)
        gw, osd = r.get("gateway_cpu_us_per_io"), r.get("osd_cpu_us_per_io")
        fmt = lambda v: "-" if v is None else f"{v:.1f}"
        print(f"{name:24} {r['iops']:8.0f} {r['iops']/ri[0]:6.2f} {r['iops']/ceph[name][0]:7.1f} {r['mean_us']:8.0f} {r['p50_us']:6.0f} {r['p99_us']:7.0f} {r['p999_us']:7.0f} {r['client_cpu_us_per_io']:10.1f} {fmt(gw):>8} {fmt(osd):>9}")
print()
print("raw writes use --sync=dsync (durable, as Pontoon's acknowledged writes are).")
PY
if [ "$ceph" = 1 ]; then
  echo "== Ceph baseline (same machine, right after)"
  ../shared/bench/ceph-baseline/run.sh
fi
