#!/usr/bin/env bash
# What snapshots and clones cost (issue 18): one local 3-OSD cluster
# (`pontoon up`), a size-3 pool, volumes of --size each written in full
# before every snapshot. 4 KiB randwrite at QD32 through the client library
# (`pontoon bench`) on a volume with 0, 1 and 10 snapshots (each taken after
# a full overwrite) and on a clone of a protected snapshot; 4 KiB randread
# at QD32 of the parent snapshot and of the clone, measured before the
# clone is written, so every read falls through to the parent. In --rounds
# rounds that take the rows in turn, so that drift of a shared machine
# falls on all of them alike: median IOPS, the ratio of the medians to the
# no-snapshot row (to the parent for the clone's reads) and the median of
# each round's ratio (paired), the OSDs' CPU µs per I/O, p99 and p99.9
# latency and the longest I/O (medians). Writes after the first round (or
# after --size / 4 KiB writes) mostly land on blocks already redirected
# since the last snapshot: a small --size measures mostly that.
#
# Then `snap create` under load: --snaps snapshots of a volume taken one
# after another while a QD32 randwrite runs on it (--load-time); each
# command's duration (p50, p99, max) and the load's longest I/O latency,
# beside the same load without snapshots. The longest latency of any one
# I/O bounds the longest pause the snapshots caused (no completion can be
# missing for longer than the slowest I/O in flight took). The pause itself:
# the same again with fio through the NBD gateway (randwrite QD32, every
# completion logged with its time), the longest gap between completions
# without snapshots, with them, and the longest gap that overlaps a
# `snap create`.
#
# Last, snap trim: every snapshot is removed and the OSDs' used bytes are
# watched for --trim-wait; if they fall, the rate; if not, it says so.
#
# Usage: bench/snapshots.sh [--time 8s] [--rounds 3] [--size 256M] [--osd-size 6G]
#                           [--snaps 20] [--load-time 30s] [--trim-wait 30] [--dir DIR]
#                           [--keep] [--profile release|ci]
# Each OSD holds every volume and snapshot (size 3 on 3 OSDs): about 20x
# --size, so --osd-size must be well over that. The OSD files are removed
# at exit unless --keep (or PONTOON_BENCH_KEEP=1). CARGO_TARGET_DIR is
# honoured.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
time=8s; rounds=3; size=256M; osdsize=6G; nsnaps=20; loadtime=30s; trimwait=30; dir=""; keep=""; profile=release
usage="usage: $0 [--time 8s] [--rounds 3] [--size 256M] [--osd-size 6G] [--snaps 20] [--load-time 30s] [--trim-wait 30] [--dir DIR] [--keep] [--profile release|ci]"
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --osd-size) osdsize="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --snaps) nsnaps="$2"; shift 2 ;;
    --load-time) loadtime="$2"; shift 2 ;;
    --trim-wait) trimwait="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
if [ "$profile" = release ]; then cargo build --release -p pontoon --bins 2>&1 | tail -1
else cargo build --profile "$profile" -p pontoon --bins 2>&1 | tail -1; fi
P=${CARGO_TARGET_DIR:-$PWD/target}/$profile/pontoon
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-snapbench.XXXXXX)
mkdir -p "$dir"
out="$dir/results"; mkdir -p "$out"
up_pid=""; load_pid=""
cleanup() {
  [ -n "$load_pid" ] && kill -TERM "$load_pid" 2>/dev/null && wait "$load_pid" 2>/dev/null
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  [ -n "$keep" ] || drop_osd_images "$dir"
  true
}
trap cleanup EXIT

echo "== pontoon up: 3 OSDs of $osdsize, 1 shard each ($dir)"
nbd_port=$(free_port)
"$P" up --dir "$dir/cluster" --osds 3 --osd-size "$osdsize" --shards 1 --nbd "127.0.0.1:$nbd_port" > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create p --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}" >/dev/null
clean() { wait_clean "$P" "${C[@]}"; }
clean
fill() { "$P" bench --volume "$1" --rw write --bs 1M --qd 8 --fill --json "${C[@]}" >/dev/null; }
for v in base s1 s10 parent busy busynbd; do
  "$P" volume create "$v" --size "$size" --pool p "${C[@]}" >/dev/null
done
echo "== filling: base; s1 then 1 snapshot; s10 and a snapshot, 10 times; parent, a protected snapshot and its clone; busy"
fill base
fill s1; "$P" snap create s1@a "${C[@]}" >/dev/null
for i in $(seq 10); do fill s10; "$P" snap create "s10@s$i" "${C[@]}" >/dev/null; done
fill parent
"$P" snap create parent@gold "${C[@]}" >/dev/null
"$P" snap protect parent@gold "${C[@]}" >/dev/null
"$P" volume clone parent@gold clone "${C[@]}" >/dev/null
fill busy
fill busynbd
clean

bench() { # NAME VOLUME RW [TIME]: one QD32 4 KiB run, JSON in $out/NAME.json
  "$P" bench --volume "$2" --rw "$3" --bs 4k --qd 32 --time "${4:-$time}" --json "${C[@]}" > "$out/$1.json"
}
echo "== 4 KiB QD32, $time each, $rounds rounds: randread of the parent and the clone, then randwrite"
for r in $(seq "$rounds"); do
  bench "read-parent-$r" parent@gold randread
  bench "read-clone-$r" clone randread
done
for r in $(seq "$rounds"); do
  bench "write-0-$r" base randwrite
  bench "write-1-$r" s1 randwrite
  bench "write-10-$r" s10 randwrite
  bench "write-clone-$r" clone randwrite
  echo "round $r done"
done

echo "== snap create under load: $nsnaps snapshots of busy during a $loadtime QD32 randwrite"
bench load-none busy randwrite "$loadtime"
bench load-snaps busy randwrite "$loadtime" &
load_pid=$!
sleep 2
: > "$out/creates"
for i in $(seq "$nsnaps"); do
  t0=$(date +%s%N)
  "$P" snap create "busy@u$i" "${C[@]}" > /dev/null 2>> "$out/create-warnings"
  t1=$(date +%s%N)
  echo "$t0 $t1" >> "$out/creates"
  sleep 0.2
done
creates_done=$(date +%s%N)
wait "$load_pid"; load_pid=""
load_done=$(date +%s%N)

echo "== the pause, with fio through NBD: $nsnaps snapshots of busynbd during a $loadtime QD32 randwrite"
fio_load() { # NAME: fio randwrite QD32 on busynbd, every completion's time logged
  fio --name="$1" --ioengine=nbd --uri="nbd://127.0.0.1:$nbd_port/busynbd" --rw=randwrite --bs=4k \
    --iodepth=32 --time_based --runtime="$loadtime" --write_lat_log="$out/$1" --log_avg_msec=0 \
    --log_unix_epoch=1 --output-format=json --output="$out/$1.json" >/dev/null
}
fio_load fio-none
fio_load fio-snaps &
load_pid=$!
sleep 2
: > "$out/fio-creates"
for i in $(seq "$nsnaps"); do
  t0=$(date +%s%N)
  "$P" snap create "busynbd@u$i" "${C[@]}" > /dev/null 2>> "$out/create-warnings"
  t1=$(date +%s%N)
  echo "$t0 $t1" >> "$out/fio-creates"
  sleep 0.2
done
wait "$load_pid"; load_pid=""

echo "== snap trim: removing every snapshot of busy, busynbd and s10, watching the OSDs' used bytes for ${trimwait}s"
used() { "$P" df --json "${C[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["raw"]["used_bytes"])'; }
used0=$(used)
trim_t0=$(date +%s%N)
for i in $(seq "$nsnaps"); do "$P" snap rm "busy@u$i" "${C[@]}" >/dev/null; "$P" snap rm "busynbd@u$i" "${C[@]}" >/dev/null; done
for i in $(seq 10); do "$P" snap rm "s10@s$i" "${C[@]}" >/dev/null; done
: > "$out/trim"
for _ in $(seq "$trimwait"); do
  echo "$(( ($(date +%s%N) - trim_t0) / 1000000 )) $(used)" >> "$out/trim"
  sleep 1
done

python3 - "$out" "$time" "$size" "$nsnaps" "$loadtime" "$creates_done" "$load_done" "$used0" "$trimwait" "$rounds" <<'EOF'
import json, statistics, sys
out, time, size, nsnaps, loadtime = sys.argv[1:6]
creates_done, load_done, used0, trimwait = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
rounds = int(sys.argv[10])
r = lambda name: json.load(open(f"{out}/{name}.json"))
med = lambda name, f: statistics.median(f(r(f"{name}-{i}")) for i in range(1, rounds + 1))
def row(label, name, base):
    iops = med(name, lambda d: d["iops"])
    paired = statistics.median(r(f"{name}-{i}")["iops"] / r(f"{base}-{i}")["iops"] for i in range(1, rounds + 1))
    try:
        osd = f"{med(name, lambda d: d['osd_cpu_us_per_io']):7.1f}"
    except KeyError:
        osd = "      -"
    print(f"{label:34} {iops:8.0f} {iops / med(base, lambda d: d['iops']):6.3f} {paired:7.3f} {osd} "
          f"{med(name, lambda d: d['p99_us']):8.0f} {med(name, lambda d: d['p999_us']):8.0f} "
          f"{med(name, lambda d: d['max_us']) / 1000:8.1f}")
print(f"\n4 KiB QD32 through the client library, {time} each, size-3 pool, volumes of {size}, medians of {rounds} rounds")
print("(ratio: of the medians; paired: median of each round's ratio)")
print(f"{'':34} {'IOPS':>8} {'ratio':>6} {'paired':>7} {'OSD us':>7} {'p99 us':>8} {'p99.9 us':>8} {'max ms':>8}")
row("randwrite, no snapshot", "write-0", "write-0")
row("randwrite, 1 snapshot", "write-1", "write-0")
row("randwrite, 10 snapshots", "write-10", "write-0")
row("randwrite, clone", "write-clone", "write-0")
row("randread, parent snapshot", "read-parent", "read-parent")
row("randread, clone (parent's data)", "read-clone", "read-parent")

spans = [tuple(map(int, l.split())) for l in open(f"{out}/creates")]
ms = sorted((b - a) / 1e6 for a, b in spans)
q = lambda p: ms[min(len(ms) - 1, int(p * len(ms)))]
none, snaps = r("load-none"), r("load-snaps")
print(f"\nsnap create under QD32 randwrite: {len(ms)} snapshots, command p50 {q(0.5):.0f} ms, "
      f"p99 {q(0.99):.0f} ms, max {ms[-1]:.0f} ms")
if creates_done > load_done:
    print(f"  (warning: the creates ran past the {loadtime} load; give a longer --load-time)")
print(f"  the {loadtime} load without snapshots: {none['iops']:.0f} IOPS, p99.9 {none['p999_us']:.0f} us, "
      f"longest I/O {none['max_us'] / 1000:.1f} ms")
print(f"  the {loadtime} load with them:         {snaps['iops']:.0f} IOPS ({snaps['iops'] / none['iops']:.3f}x), "
      f"p99.9 {snaps['p999_us']:.0f} us, longest I/O {snaps['max_us'] / 1000:.1f} ms (bounds the pause)")

def completions(name):  # completion times (unix ms) of fio's latency log
    return sorted(int(l.split(",")[0]) for l in open(f"{out}/{name}_lat.1.log") if l.strip())
def gaps(ts):  # (gap ms, from, to) between consecutive completions
    return [(b - a, a, b) for a, b in zip(ts, ts[1:])]
fio_iops = lambda name: json.load(open(f"{out}/{name}.json"))["jobs"][0]["write"]["iops"]
g_none, g_snaps = gaps(completions("fio-none")), gaps(completions("fio-snaps"))
windows = [tuple(int(x) // 10**6 for x in l.split()) for l in open(f"{out}/fio-creates")]
per_create = [max((g[0] for g in g_snaps if g[1] < b and g[2] > a), default=0) for a, b in windows]
print(f"\nthe pause, fio randwrite QD32 through NBD for {loadtime} (completion times in ms):")
print(f"  without snapshots: {fio_iops('fio-none'):.0f} IOPS, longest gap between completions {max(g_none)[0]} ms")
print(f"  with {len(windows)} snap creates: {fio_iops('fio-snaps'):.0f} IOPS, longest gap {max(g_snaps)[0]} ms; "
      f"longest gap overlapping a snap create {max(per_create)} ms (median over the creates {statistics.median(per_create):.0f} ms)")

trim = [tuple(map(int, l.split())) for l in open(f"{out}/trim")]
# s10's first nine snapshots each hold one full overwrite that nothing else
# references: at least 9 x size x 3 copies come back if they are trimmed.
units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
vol = int(size[:-1]) * units[size[-1].upper()] if size[-1].upper() in units else int(size)
expect = 9 * vol * 3
low = min(trim, key=lambda t: t[1]) if trim else (0, used0)
freed = used0 - low[1]
if freed >= max(expect // 10, 16 * 2**20):
    print(f"\nsnap trim: {freed / 2**20:.0f} MiB of OSD space freed within {low[0] / 1000:.1f} s of the removals "
          f"({freed / 2**20 / max(low[0] / 1000, 0.001):.0f} MiB/s, 1 s polling; at least {expect / 2**20:.0f} MiB to free)")
else:
    print(f"\nsnap trim: not measurable: removing {2 * int(nsnaps) + 10} snapshots freed {max(freed, 0) / 2**20:.0f} MiB "
          f"of the OSDs' {used0 / 2**30:.2f} GiB within {trimwait} s, where trimming would free at least "
          f"{expect / 2**20:.0f} MiB (removed snapshots are not trimmed on this build)")
EOF
