#!/usr/bin/env bash
# What observability costs the OSDs: CPU per I/O with metrics on (per-I/O
# counting, every daemon's /metrics scraped once a second, as a Prometheus
# with a 1 s interval would) against off (PONTOON_OSD_OP_METRICS=0: no
# per-I/O counting, nobody scrapes). Two local 3-OSD clusters run side by
# side on the same disk, one of each kind; `pontoon bench` alternates
# between them, --rounds times over (each round in the other order), so
# drift hits both alike. Tests: 4 KiB randread QD32 on a size-1 volume and
# 4 KiB randwrite QD32 on a size-3 volume. Prints each pair and the median
# of the OSDs' CPU µs per I/O and of the IOPS, on against off.
#
# Usage: bench/metrics-cost.sh [--time 8] [--rounds 6] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
time=8; rounds=6; dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time="${2%s}"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "usage: $0 [--time 8] [--rounds 6] [--dir DIR]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
cargo build --release -p pontoon 2>&1 | tail -1
P=$PWD/target/release/pontoon
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-metrics-cost.XXXXXX)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pids=(); scraper=""
cleanup() {
  [ -n "$scraper" ] && kill "$scraper" 2>/dev/null
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  drop_osd_images "$dir"
  true
}
trap cleanup EXIT

for mode in on off; do
  echo "== cluster '$mode': 3 OSDs of 2 GiB, 1 shard each"
  mkdir -p "$dir/$mode"
  if [ "$mode" = off ]; then export PONTOON_OSD_OP_METRICS=0; else unset PONTOON_OSD_OP_METRICS; fi
  "$P" up --dir "$dir/$mode/cluster" --osds 3 --osd-size 2G --shards 1 > "$dir/$mode/up.log" 2>&1 &
  pids+=($!)
  wait_cluster "$dir/$mode"
  C=(--cluster "$dir/$mode/cluster")
  "$P" pool create size1 --size 1 --min-size 1 --pgs 64 --failure-domain osd "${C[@]}" >/dev/null
  "$P" pool create size3 --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}" >/dev/null
  "$P" volume create v1 --size 512M --pool size1 "${C[@]}" >/dev/null
  "$P" volume create v3 --size 512M --pool size3 "${C[@]}" >/dev/null
  "$P" bench --volume v1 --fill --bs 1M --qd 4 "${C[@]}" 2>/dev/null
done
unset PONTOON_OSD_OP_METRICS

# Every daemon of the 'on' cluster, scraped once a second.
targets=$("$P" status --json --cluster "$dir/on/cluster" | jq -r '.daemons[].metrics // empty')
echo "scraping every second: $(echo $targets | wc -w) endpoints of cluster 'on'"
(
  while true; do
    for t in $targets; do curl -s -o /dev/null --max-time 1 "http://$t/metrics" || true; done
    sleep 1
  done
) &
scraper=$!

run() { # mode rw volume round
  "$P" bench --volume "$3" --rw "$2" --qd 32 --time "${time}s" --json --cluster "$dir/$1/cluster" \
    > "$dir/$1-$2-$4.json"
}
for r in $(seq 1 "$rounds"); do
  for rw in randread:v1 randwrite:v3; do
    if [ $((r % 2)) = 1 ]; then order="on off"; else order="off on"; fi
    for mode in $order; do run "$mode" "${rw%%:*}" "${rw#*:}" "$r"; done
  done
  echo "-- round $r done"
done

python3 - "$dir" "$rounds" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def get(mode, rw, r):
    j = json.load(open(f"{d}/{mode}-{rw}-{r}.json"))
    return j["iops"], j["osd_cpu_us_per_io"]
print("OSD CPU per I/O (all OSDs, µs) and IOPS, metrics on (scraped every 1 s) vs off")
print(f"{'test':<22}{'round':>6}{'cpu on':>9}{'cpu off':>9}{'ratio':>8}{'IOPS on':>10}{'IOPS off':>10}")
for rw, name in (("randread", "size1 randread qd32"), ("randwrite", "size3 randwrite qd32")):
    ratios, iops = [], []
    for r in range(1, rounds + 1):
        (ion, con), (ioff, coff) = get("on", rw, r), get("off", rw, r)
        ratios.append(con / coff); iops.append(ion / ioff)
        print(f"{name:<22}{r:>6}{con:>9.2f}{coff:>9.2f}{con/coff:>8.3f}{ion:>10.0f}{ioff:>10.0f}")
    print(f"{name:<22}{'median':>6}{'':>18}{statistics.median(ratios):>8.3f}  IOPS on/off {statistics.median(iops):.3f}")
PY
