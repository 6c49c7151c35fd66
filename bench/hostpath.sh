#!/usr/bin/env bash
# Host-path benchmark: where applications live. A local 3-OSD cluster
# (`pontoon up --nbd`), pools of size 1 and 3, and through the NBD gateway
# (fio's nbd engine) and the client library (`pontoon bench`):
#   - 4 KiB randread QD1 (size 1) and randwrite QD1 (size 3);
#   - 4 KiB randread QD32 (size 1) and randwrite QD32 (size 3);
#   - 64 KiB sequential write QD8 (size 3);
#   - a database-like job: 8 jobs at QD1, 16 KiB random 70/30 read/write,
#     a flush after every I/O (--fsync=1), on size 3 and size 1;
# each beside the same fio job on a raw file of the same filesystem, in the
# same run; and 4 KiB QD1/QD32 rows through the NVMe/TCP gateway (the Rust
# test initiator of `pontoon bench --nvmf`, one I/O queue). NBD rows are measured with ../shared/tools/io-cost (--perf): CPU
# µs per I/O, sleeps (voluntary switches) and syscalls per I/O for the
# gateway and the OSDs, and latency to p99.9.
#
# Usage: bench/hostpath.sh [--time 10] [--dir DIR] [--workers N]
#   --workers  NBD gateway worker threads (default: the gateway's default)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
time=10; dir=""; workers=""
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time="${2%s}"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    *) echo "usage: $0 [--time 10] [--dir DIR] [--workers N]" >&2; exit 2 ;;
  esac
done
IO_COST=${IO_COST:-../shared/tools/io-cost/io-cost}
[ -x "$IO_COST" ] || { echo "needs $IO_COST (the workplace's io-cost tool)" >&2; exit 2; }
scripts/deps.sh demo >/dev/null
command -v perf >/dev/null || apt-get install -y -qq linux-perf >/dev/null
cargo build --release -p pontoon 2>&1 | tail -1
P=$PWD/target/release/pontoon
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-hostpath.XXXXXX)
mkdir -p "$dir"
out="$dir/results"; mkdir -p "$out"
up_pid=""; gw_pid=""
cleanup() {
  [ -n "$gw_pid" ] && kill -TERM "$gw_pid" 2>/dev/null && wait "$gw_pid" 2>/dev/null
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  drop_osd_images "$dir"
  true
}
trap cleanup EXIT

# name rw bs qd extra...: one job, both on the raw file and on NBD.
JOBS=(
  "randread-qd1     randread  4k  1"
  "randwrite-qd1    randwrite 4k  1"
  "randread-qd32    randread  4k  32"
  "randwrite-qd32   randwrite 4k  32"
  "seqwrite64k-qd8  write     64k 8"
  "db               randrw    16k 1 --rwmixread=70 --numjobs=8 --fsync=1"
)
pool_of() { case "$1" in randread*) echo 1 ;; db) echo "1 3" ;; *) echo 3 ;; esac; }

echo "== raw fio on $(df --output=target "$dir" | tail -1) (1 GiB file, io_uring, direct=1)"
raw="$dir/raw.fio"
fio --name=layout --filename="$raw" --size=1G --rw=write --bs=1M --ioengine=io_uring --direct=1 \
    --iodepth=8 --output=/dev/null
for j in "${JOBS[@]}"; do
  read -r name rw bs qd extra <<<"$j"
  sync=(); [ "$rw" != randread ] && [ "$name" != db ] && sync=(--sync=dsync)
  echo "-- raw $name"
  # shellcheck disable=SC2086
  "$IO_COST" --pids "$$" --no-fio-row --seconds "$time" --json "$out/raw-$name.json" -- \
      --name=raw --filename="$raw" --size=1G --ioengine=io_uring --direct=1 --rw="$rw" --bs="$bs" \
      --iodepth="$qd" --norandommap --randrepeat=0 "${sync[@]}" $extra > /dev/null
done
rm -f "$raw"

echo "== pontoon up: 3 OSDs of 3 GiB, 1 shard each"
nbd_port=$(free_port); nvmf_port=$(free_port)
up_nbd=(--nbd 127.0.0.1:$nbd_port); [ -n "$workers" ] && up_nbd=()
"$P" up --dir "$dir/cluster" --osds 3 --osd-size 3G --shards 1 "${up_nbd[@]}" \
    --nvmf 127.0.0.1:$nvmf_port > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
if [ -n "$workers" ]; then
  "$P" nbd --listen 127.0.0.1:$nbd_port --workers "$workers" "${C[@]}" > "$dir/nbd.log" 2>&1 &
  gw_pid=$!
  echo "$gw_pid" > "$dir/cluster/run/nbd.pid"
fi
"$P" pool create size1 --size 1 --min-size 1 --pgs 64 --failure-domain osd "${C[@]}"
"$P" pool create size3 --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}"
"$P" volume create v1 --size 1G --pool size1 "${C[@]}"
"$P" volume create v3 --size 1G --pool size3 "${C[@]}"
host=nqn.2026-11.io.pontoon:hostpath
for v in v1 v3; do
  "$P" bench --volume "$v" --fill --bs 4M --qd 4 "${C[@]}"
  nvmf_export "$P" "$host" "$v" "${C[@]}"
done
for _ in $(seq 1 40); do nbdinfo "nbd://127.0.0.1:$nbd_port/v1" >/dev/null 2>&1 && break; sleep 0.25; done

for j in "${JOBS[@]}"; do
  read -r name rw bs qd extra <<<"$j"
  for pool in $(pool_of "$name"); do
    echo "-- NBD size$pool $name"
    # shellcheck disable=SC2086
    "$IO_COST" --cluster "$dir/cluster" --perf --seconds "$time" --json "$out/nbd-size$pool-$name.json" -- \
        --name=nbd --ioengine=nbd --uri="nbd://127.0.0.1:$nbd_port/v$pool" --size=1G --rw="$rw" \
        --bs="$bs" --iodepth="$qd" --norandommap --randrepeat=0 $extra > /dev/null
  done
done
for t in "randread 1 1" "randread 32 1" "randwrite 1 3" "randwrite 32 3"; do
  read -r rw qd pool <<<"$t"
  echo "-- client library size$pool $rw-qd$qd"
  "$P" bench --volume "v$pool" --rw "$rw" --bs 4k --qd "$qd" --time "${time}s" --json "${C[@]}" \
      > "$out/lib-size$pool-$rw-qd$qd.json"
done
for t in "randread 1 1" "randread 32 1" "randwrite 1 3" "randwrite 32 3"; do
  read -r rw qd pool <<<"$t"
  echo "-- NVMe/TCP size$pool $rw-qd$qd"
  "$P" bench --nvmf 127.0.0.1:$nvmf_port --nqn "nqn.2026-11.io.pontoon:v$pool" --hostnqn "$host" \
      --rw "$rw" --bs 4k --qd "$qd" --time "${time}s" --json "${C[@]}" > "$out/nvmf-size$pool-$rw-qd$qd.json"
done
cleanup; up_pid=""; gw_pid=""
rm -rf "$dir/cluster"
echo "results: $out"

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(n):
    return json.load(open(os.path.join(out, n)))
def lat(j):
    d = j["fio"]["directions"]
    ios = sum(x["ios"] for x in d) or 1
    mean = sum(x["lat_mean_us"] * x["ios"] for x in d) / ios
    worst = lambda k: max(x[k] for x in d)
    return j["fio"]["iops"], mean, worst("p50_us"), worst("p99_us"), worst("p999_us")
def proc(j, prefix):
    rows = [p for p in j["processes"] if p["label"].startswith(prefix)]
    cpu = sum(p["per_io"]["cpu_us"] for p in rows)
    sleeps = sum(p["per_io"]["vcsw"] for p in rows)
    sys_ = sum((p.get("perf_per_io") or {}).get("syscalls", 0) for p in rows)
    return cpu, sleeps, sys_
print()
print("Through NBD (fio ioengine=nbd) beside raw fio on the same filesystem; p-values are the worst direction's;")
print("gw/OSD columns: CPU µs, sleeps and syscalls per I/O (OSD columns summed over the three OSDs)")
hdr = f"{'job':26} {'IOPS':>8} {'x raw':>6} {'mean':>7} {'p50':>6} {'p99.9':>7} {'p99.9/p50':>9} {'raw mean':>8} {'raw p99.9':>9} {'gw cpu':>7} {'gw slp':>6} {'gw sc':>6} {'osd cpu':>7} {'osd slp':>7} {'osd sc':>6}"
print(hdr)
for f in sorted(os.listdir(out)):
    if not (f.startswith("nbd-") and f.endswith(".json")):
        continue
    name = f[len("nbd-"):-len(".json")]
    job = name.split("-", 1)[1]
    j = load(f); r = load(f"raw-{job}.json")
    i, m, p50, p99, p999 = lat(j)
    ri, rm, _, _, rp999 = lat(r)
    g = proc(j, "nbd"); o = proc(j, "osd")
    print(f"{name:26} {i:8.0f} {i/ri:6.2f} {m:7.0f} {p50:6.0f} {p999:7.0f} {p999/p50:9.1f} {rm:8.0f} {rp999:9.0f} {g[0]:7.1f} {g[1]:6.2f} {g[2]:6.2f} {o[0]:7.1f} {o[1]:7.2f} {o[2]:6.2f}")
for prefix, title in (("lib-", "Client library (pontoon bench)"), ("nvmf-", "NVMe/TCP (pontoon bench --nvmf, one I/O queue)")):
    print()
    print(f"{title} beside raw fio; cpu columns: µs per I/O")
    print(f"{'test':26} {'IOPS':>8} {'x raw':>6} {'mean':>7} {'p99.9':>7} {'raw mean':>8} {'client':>7} {'gw':>6} {'OSD':>7}")
    fmt = lambda v: "-" if v is None else f"{v:.1f}"
    for f in sorted(os.listdir(out)):
        if not f.startswith(prefix):
            continue
        name = f[len(prefix):-len(".json")]
        r = load(f)
        job = name.split("-", 1)[1]
        ri, rm, *_ = lat(load(f"raw-{job}.json"))
        print(f"{name:26} {r['iops']:8.0f} {r['iops']/ri:6.2f} {r['mean_us']:7.0f} {r['p999_us']:7.0f} {rm:8.0f} {r['client_cpu_us_per_io']:7.1f} {fmt(r.get('gateway_cpu_us_per_io')):>6} {fmt(r.get('osd_cpu_us_per_io')):>7}")
print()
print("raw writes use --sync=dsync (durable when acknowledged, as Pontoon's writes are); the db job flushes after every I/O on both.")
PY
