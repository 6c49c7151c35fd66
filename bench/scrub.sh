#!/usr/bin/env bash
# What a deep scrub costs client I/O, and how fast it goes: a local 3-OSD
# cluster (`pontoon up`), a size-3 pool of 32 PGs, a 1 GiB volume written
# in full; 4 KiB randread at QD32 through the client library before, during
# and after `pontoon pool deep-scrub` (IOPS, OSD CPU µs per I/O, p99.9),
# the scrub's duration and data rate, and the ratio of the IOPS during the
# scrub to the mean of before and after.
#
# Usage: bench/scrub.sh [--time 8] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
secs=8; dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --time) secs="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "usage: $0 [--time 8] [--dir DIR]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
cargo build --release -p pontoon 2>&1 | tail -1
P=$PWD/target/release/pontoon
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-scrub.XXXXXX)
mkdir -p "$dir"
up_pid=""
cleanup() {
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  drop_osd_images "$dir"
  true
}
trap cleanup EXIT

echo "== pontoon up: 3 OSDs of 2 GiB ($dir)"
"$P" up --dir "$dir/cluster" --osds 3 --osd-size 2G --shards 1 > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create p --size 3 --pgs 32 --failure-domain osd "${C[@]}" >/dev/null
"$P" volume create v --size 1G --pool p "${C[@]}" >/dev/null
for _ in $(seq 1 120); do "$P" status "${C[@]}" | grep -q "32 active+clean" && break; sleep 0.5; done
"$P" bench --volume v --fill --bs 4M --qd 4 "${C[@]}"

run() {
  "$P" bench --volume v --rw randread --qd 32 --time "${secs}s" --json "${C[@]}" > "$dir/$1.json"
  python3 - "$dir/$1.json" "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:>8}: {d['iops']:9.0f} IOPS, OSD {d.get('osd_cpu_us_per_io', 0):5.1f} µs/IO, "
      f"p99 {d['p99_us']:.0f} µs, p99.9 {d['p999_us']:.0f} µs")
EOF
}
run before
t0=$(date +%s.%N)
"$P" pool deep-scrub p "${C[@]}"
run during
done_pgs() {
  "$P" pg ls --json "${C[@]}" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(sum(1 for p in v if p["scrub"].get("last_deep_scrub_unix") and not p["scrub"].get("progress")))'
}
for _ in $(seq 1 600); do [ "$(done_pgs)" = 32 ] && break; sleep 0.5; done
t1=$(date +%s.%N)
run after
python3 - "$dir" "$t0" "$t1" <<'EOF'
import json, sys
d, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
iops = {k: json.load(open(f"{d}/{k}.json"))["iops"] for k in ("before", "during", "after")}
secs = t1 - t0
print(f"deep scrub of 1 GiB x 3 copies: {secs:.1f} s (0.5 s polling), {1024 / secs:.0f} MiB/s of volume data")
print(f"client randread QD32 during the scrub: {iops['during'] / ((iops['before'] + iops['after']) / 2):.2f}x "
      f"(before {iops['before']:.0f}, during {iops['during']:.0f}, after {iops['after']:.0f})")
EOF
