#!/usr/bin/env bash
# Snap trim's rate: a local 3-OSD cluster (size-3 pool, so every OSD holds
# every object), a volume filled, snapshotted and wholly overwritten, then
# the snapshot removed. The OSDs' /metrics (pontoon_osd_snap_trim_*) are
# polled every 100 ms from `snap rm` until every OSD has freed the
# snapshot's data; prints objects/s and MiB freed/s per OSD (the first
# poll to the last, and from `snap rm`), and each OSD's own measure from
# its log (first trim call to the last). With --load, a 4 KiB randwrite
# QD32 on another volume runs meanwhile (trim yields to it) and its IOPS
# with and without trim are printed.
#
# Usage: bench/snap-trim.sh [--size 1G] [--load] [--dir DIR]
#        (P=path/to/pontoon to skip the release build; PONTOON_BENCH_KEEP=1
#        keeps the OSD files)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size=1G; load=""; dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --size) size="$2"; shift 2 ;;
    --load) load=1; shift ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "usage: $0 [--size 1G] [--load] [--dir DIR]" >&2; exit 2 ;;
  esac
done
if [ -z "${P:-}" ]; then
  cargo build --release -p pontoon 2>&1 | tail -1
  P=$PWD/target/release/pontoon
fi
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-snap-trim.XXXXXX)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
upid=""; loadpid=""
cleanup() {
  [ -n "$loadpid" ] && kill "$loadpid" 2>/dev/null
  [ -n "$upid" ] && kill -TERM "$upid" 2>/dev/null && wait "$upid" 2>/dev/null
  # The OSD files are 15 GiB together: gone on every exit unless asked.
  drop_osd_images "$dir"
  true
}
trap cleanup EXIT

"$P" up --dir "$dir/cluster" --osds 3 --osd-size 5G --shards 1 > "$dir/up.log" 2>&1 &
upid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create p --size 3 --min-size 2 --pgs 32 --failure-domain osd "${C[@]}" >/dev/null
"$P" volume create v --size "$size" --pool p "${C[@]}" >/dev/null
"$P" volume create w --size 256M --pool p "${C[@]}" >/dev/null
"$P" bench --volume v --fill --bs 4M --qd 4 "${C[@]}" >/dev/null 2>&1
"$P" snap create v@s "${C[@]}" >/dev/null
"$P" bench --volume v --fill --bs 4M --qd 4 "${C[@]}" >/dev/null 2>&1
targets=$("$P" status --json "${C[@]}" | jq -r '.daemons[] | select(.kind=="osd") | .metrics')
want=$(numfmt --from=iec "$size")
metric() { # name -> sum over OSDs
  local t s=0
  for t in $targets; do
    v=$(curl -s --max-time 1 "http://$t/metrics" | awk -v n="$1" '$1 ~ "^"n {s+=$2} END {printf "%.0f", s}')
    s=$((s + v))
  done
  echo "$s"
}
if [ -n "$load" ]; then
  "$P" bench --volume w --rw randwrite --bs 4k --qd 32 --time 5s --json "${C[@]}" > "$dir/load-alone.json"
  "$P" bench --volume w --rw randwrite --bs 4k --qd 32 --time 20s --json "${C[@]}" > "$dir/load-trim.json" &
  loadpid=$!
  sleep 2
fi
f0=$(metric pontoon_osd_snap_trim_freed_bytes_total)
o0=$(metric pontoon_osd_snap_trim_objects_total)
t0=$(date +%s.%N)
"$P" snap rm v@s "${C[@]}" >/dev/null
first=""; 
while :; do
  f=$(metric pontoon_osd_snap_trim_freed_bytes_total)
  now=$(date +%s.%N)
  [ -z "$first" ] && [ "$f" -gt "$f0" ] && first=$now
  [ $((f - f0)) -ge $((3 * want)) ] && break
  if python3 -c "import sys; sys.exit(0 if $now - $t0 < 300 else 1)"; then sleep 0.1; else echo "trim did not finish in 300 s" >&2; exit 1; fi
done
o=$(metric pontoon_osd_snap_trim_objects_total)
python3 - "$t0" "${first:-$now}" "$now" "$((f - f0))" "$((o - o0))" <<'PY'
import sys
t0, first, end, freed, objs = map(float, sys.argv[1:])
per_osd_mib, per_osd_obj = freed / 3 / 2**20, objs / 3
for what, t in (("from snap rm", end - t0), ("from the first freed block", end - first)):
    if t <= 0:
        continue
    print(f"{what}: {t:.2f} s; per OSD {per_osd_obj:.0f} objects, {per_osd_mib:.0f} MiB: "
          f"{per_osd_obj / t:.0f} objects/s, {per_osd_mib / t:.0f} MiB/s")
PY
echo "each OSD's own measure (first trim call to the last):"
grep -h "snap trim done" "$dir"/cluster/log/osd.*.log | sed 's/^.*INFO //'
if [ -n "$load" ]; then
  wait "$loadpid"; loadpid=""
  jq -r '"randwrite alone: \(.iops) IOPS"' "$dir/load-alone.json" 2>/dev/null || cat "$dir/load-alone.json"
  jq -r '"randwrite with trim in its first seconds: \(.iops) IOPS"' "$dir/load-trim.json" 2>/dev/null || cat "$dir/load-trim.json"
fi
