#!/usr/bin/env bash
# What the binary protocol's modes cost: one local 3-OSD cluster (`pontoon
# up`), pools of size 1 and 3, 4 KiB random read and write at QD32 through
# the client library (`pontoon bench`), in each `ms_mode` — none,
# authenticated (keys, every frame signed), secure (also encrypted) —
# switched live with `pontoon config set ms_mode`, in rounds that alternate
# the modes so that drift of a shared machine falls on all of them alike.
# Prints IOPS and CPU µs per I/O (client and OSDs) per mode, and the
# ratios to mode none, medians over the rounds.
#
# Usage: bench/ms-mode.sh [--time 8s] [--rounds 3] [--dir DIR] [--profile release|ci]
#                         [--modes "none authenticated secure"] [--rw "randread randwrite"]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
time=8s; rounds=3; dir=""; profile=release; modes="none authenticated secure"; rws="randread randwrite"
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --rw) rws="$2"; shift 2 ;;
    *) echo "usage: $0 [--time 8s] [--rounds 3] [--dir DIR] [--profile release|ci] [--modes LIST] [--rw LIST]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
if [ "$profile" = release ]; then cargo build --release -p pontoon 2>&1 | tail -1
else cargo build --profile "$profile" -p pontoon 2>&1 | tail -1; fi
P=$PWD/target/$profile/pontoon
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-msmode.XXXXXX)
mkdir -p "$dir"
out="$dir/results"; mkdir -p "$out"
up_pid=""
cleanup() { [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null; drop_osd_images "$dir"; true; }
trap cleanup EXIT

echo "== pontoon up: 3 OSDs of 2 GiB, 1 shard each"
"$P" up --dir "$dir/cluster" --osds 3 --osd-size 2G --shards 1 > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create size1 --size 1 --min-size 1 --pgs 64 --failure-domain osd "${C[@]}" >/dev/null
"$P" pool create size3 --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}" >/dev/null
"$P" volume create v1 --size 1G --pool size1 "${C[@]}" >/dev/null
"$P" volume create v3 --size 1G --pool size3 "${C[@]}" >/dev/null
clean() { wait_clean "$P" "${C[@]}"; }
clean
# Fill both volumes so reads find data.
"$P" bench --volume v1 --rw write --bs 1M --qd 8 --fill "${C[@]}" >/dev/null
"$P" bench --volume v3 --rw write --bs 1M --qd 8 --fill "${C[@]}" >/dev/null

for r in $(seq "$rounds"); do
  for mode in $modes; do
    "$P" config set ms_mode "$mode" "${C[@]}" >/dev/null
    clean
    for v in v1 v3; do
      for rw in $rws; do
        "$P" bench --volume "$v" --rw "$rw" --bs 4k --qd 32 --time "$time" --json "${C[@]}" \
          > "$out/$mode-$v-$rw-$r.json"
      done
    done
    echo "round $r: $mode done"
  done
done

python3 - "$out" "$rounds" "$modes" "$rws" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
modes, rws = sys.argv[3].split(), sys.argv[4].split()
def load(mode, v, rw):
    rs = [json.load(open(f"{out}/{mode}-{v}-{rw}-{r}.json")) for r in range(1, rounds + 1)]
    med = lambda f: statistics.median(f(x) for x in rs)
    return (med(lambda x: x["iops"]), med(lambda x: x["client_cpu_us_per_io"]),
            med(lambda x: x["osd_cpu_us_per_io"]))
print(f"\n4 KiB QD32 through the client library, medians of {rounds} rounds")
print("(x none: ratio of the medians; paired: median of each round's ratio to that round's none)")
print(f"{'volume':8} {'rw':10} {'mode':14} {'IOPS':>8} {'x none':>7} {'paired':>7} {'client us':>9} {'OSD us':>7} {'x none':>7}")
def paired(mode, v, rw):
    iops = lambda m, r: json.load(open(f"{out}/{m}-{v}-{rw}-{r}.json"))["iops"]
    return statistics.median(iops(mode, r) / iops("none", r) for r in range(1, rounds + 1))
for v in ["v1", "v3"]:
    for rw in rws:
        base = load("none", v, rw)
        for mode in modes:
            iops, cli, osd = load(mode, v, rw)
            size = "size 1" if v == "v1" else "size 3"
            print(f"{size:8} {rw:10} {mode:14} {iops:8.0f} {iops / base[0]:7.3f} {paired(mode, v, rw):7.3f} {cli:9.1f} {osd:7.1f} {osd / base[2]:7.3f}")
EOF
