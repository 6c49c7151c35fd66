#!/usr/bin/env bash
# How long client I/O stalls when an OSD freezes: a local 3-OSD cluster
# (`pontoon up --nbd`), a size-3 volume, fio writing 4 KiB blocks at random
# through the NBD gateway (fio's nbd engine) with verification of what it
# wrote; after --before, one OSD is frozen with SIGSTOP for --freeze, then
# thawed with SIGCONT. From fio's log of every completed write it prints
# when I/O resumed after the freeze (the end of the longest gap between
# completions, from the SIGSTOP), the longest gap, fio's longest write,
# and whether fio's verification passed.
#
# All OSDs of `pontoon up` share one host, so the manager holds none down
# on its peers' reports (those count only from other hosts): the frozen
# OSD is taken out when its lease lapses (TTL 7 s).
#
# Usage: bench/freeze.sh [--before 10] [--freeze 30] [--after 20] [--qd 4] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
before=10; freeze=30; after=20; qd=4; dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --before) before="$2"; shift 2 ;;
    --freeze) freeze="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --qd) qd="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "usage: $0 [--before 10] [--freeze 30] [--after 20] [--qd 4] [--dir DIR]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
cargo build --release -p pontoon 2>&1 | tail -1
P=$PWD/target/release/pontoon
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-freeze.XXXXXX)
mkdir -p "$dir"
up_pid=""; frozen=""
cleanup() {
  [ -n "$frozen" ] && kill -CONT "$frozen" 2>/dev/null
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  drop_osd_images "$dir"
  true
}
trap cleanup EXIT

nbd_port=$(free_port)
echo "== pontoon up: 3 OSDs of 2 GiB, NBD on 127.0.0.1:$nbd_port ($dir)"
"$P" up --dir "$dir/cluster" --osds 3 --osd-size 2G --shards 1 --nbd 127.0.0.1:$nbd_port > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create size3 --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}"
"$P" volume create v3 --size 1G --pool size3 "${C[@]}"
for _ in $(seq 1 120); do "$P" status "${C[@]}" | grep -q "64 active+clean" && break; sleep 0.5; done

total=$((before + freeze + after))
echo "== fio: 4k randwrite QD$qd with crc32c verification, ${total} s; osd.0 frozen at ${before} s for ${freeze} s"
(cd "$dir" && fio --name=freeze --ioengine=nbd --uri="nbd://127.0.0.1:$nbd_port/v3" --size=256M --rw=randwrite --bs=4k \
    --iodepth="$qd" --time_based --runtime="$total" --verify=crc32c --verify_backlog=256 \
    --verify_fatal=1 --write_lat_log="$dir/fio" --log_avg_msec=0 \
    --output-format=json --output="$dir/fio.json") &
fio_pid=$!
t0=$(date +%s.%N)
sleep "$before"
osd=$(cat "$dir/cluster/run/osd.0.pid")
kill -STOP "$osd"; frozen=$osd
t_stop=$(date +%s.%N)
sleep "$freeze"
kill -CONT "$osd"; frozen=""
t_cont=$(date +%s.%N)
fio_rc=0; wait "$fio_pid" || fio_rc=$?
python3 - "$dir" "$t0" "$t_stop" "$t_cont" "$fio_rc" <<'EOF'
import glob, json, sys
d, t0, t_stop, t_cont, rc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
stop, cont = t_stop - t0, t_cont - t0
done = []
for f in glob.glob(f"{d}/fio_clat*.log"):
    for line in open(f):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[2] == "1":  # direction 1: writes
            done.append(int(parts[0]) / 1000.0)
done.sort()
marks = [stop] + [t for t in done if t > stop] + [max(done[-1] if done else stop, cont)]
gap, gap_from = 0.0, stop
for a, b in zip(marks, marks[1:]):
    if b - a > gap:
        gap, gap_from = b - a, a
job = json.load(open(f"{d}/fio.json"))["jobs"][0]["write"]
clat = job["clat_ns"]
print(f"writes completed: {len(done)}, {job['iops']:.0f} IOPS on average")
print(f"osd.0 frozen at {stop:.1f} s, thawed at {cont:.1f} s (fio's clock)")
print(f"I/O resumed {gap_from + gap - stop:.1f} s after the freeze; longest gap between completions {gap:.1f} s (from {gap_from - stop:+.1f} s)")
print(f"fio's longest write {clat['max'] / 1e9:.2f} s; p99.9 {clat['percentile'].get('99.900000', 0) / 1e6:.1f} ms")
print("fio's verification:", "passed" if rc == 0 else f"FAILED (fio exit {rc})")
sys.exit(0 if rc == 0 else 1)
EOF
