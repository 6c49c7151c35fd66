#!/usr/bin/env bash
# Host paths side by side: the same volume, the same 4 KiB random load, in
# one run on one local 3-OSD cluster (`pontoon up --nbd --nvmf`), through
#   lib    `pontoon bench` (the Rust client library, compio closed loop);
#   fio    fio through Pontoon's ioengine (libpontoon_fio.so over the C API,
#          scripts/build-fio-engine.sh);
#   nbd    fio's nbd engine through the NBD gateway;
#   nvmf   the NVMe/TCP gateway (`pontoon bench --nvmf`, the Rust test
#          initiator, one I/O queue);
# beside raw fio on a file of the same filesystem (io_uring, direct=1;
# writes --sync=dsync, durable when acknowledged as Pontoon's are).
# Tests: randread QD1 and QD32 on the size-1 and the size-3 volume,
# randwrite QD1 and QD32 on the size-3 volume; for each test the paths run
# one after another (so drift hits them alike), --rounds times over (each
# round in another order); every figure is the median over the rounds.
# Prints IOPS, mean, p99 and p99.9 latency (fio: total latency,
# lat_percentiles=1), client CPU per I/O and each path's ratio to
# `pontoon bench`, and whether the engine meets its targets (IOPS >= 0.95x
# `pontoon bench` at QD32, QD1 mean latency within 10 µs of it).
#
# Usage: bench/host-paths.sh [--time 10] [--rounds 1] [--dir DIR] [--only TEST[,TEST...]]
#   --only  run only these tests (e.g. size3-randwrite-qd1)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
time=10; rounds=1; dir=""; only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time="${2%s}"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --only) only=",$2,"; shift 2 ;;
    *) echo "usage: $0 [--time 10] [--rounds 1] [--dir DIR] [--only TEST[,TEST...]]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh demo >/dev/null
cargo build --release -p pontoon 2>&1 | tail -1
P=$PWD/target/release/pontoon
ENGINE=$(scripts/build-fio-engine.sh)
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-host-paths.XXXXXX)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
out="$dir/results"; mkdir -p "$out"
up_pid=""
cleanup() { [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null; drop_osd_images "$dir"; true; }
trap cleanup EXIT

# name rw qd pool
TESTS=(
  "size1-randread-qd1   randread  1  1"
  "size1-randread-qd32  randread  32 1"
  "size3-randread-qd1   randread  1  3"
  "size3-randread-qd32  randread  32 3"
  "size3-randwrite-qd1  randwrite 1  3"
  "size3-randwrite-qd32 randwrite 32 3"
)
FIO_COMMON=(--bs=4k --norandommap --randrepeat=0 --time_based --runtime="$time" --lat_percentiles=1
            --output-format=json)

echo "== raw fio on $(df --output=target "$dir" | tail -1) (1 GiB file, io_uring, direct=1)"
raw="$dir/raw.fio"
fio --name=layout --filename="$raw" --size=1G --rw=write --bs=1M --ioengine=io_uring --direct=1 \
    --iodepth=8 --output=/dev/null
for rq in "randread 1" "randread 32" "randwrite 1" "randwrite 32"; do
  read -r rw qd <<<"$rq"
  sync=(); [ "$rw" = randwrite ] && sync=(--sync=dsync)
  fio --name=raw --filename="$raw" --size=1G --ioengine=io_uring --direct=1 --rw="$rw" \
      --iodepth="$qd" "${sync[@]}" "${FIO_COMMON[@]}" --output="$out/raw-$rw-qd$qd.json"
done
rm -f "$raw"

echo "== pontoon up: 3 OSDs of 3 GiB, 1 shard each"
nbd_port=$(free_port); nvmf_port=$(free_port)
"$P" up --dir "$dir/cluster" --osds 3 --osd-size 3G --shards 1 --nbd 127.0.0.1:$nbd_port \
    --nvmf 127.0.0.1:$nvmf_port > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create size1 --size 1 --min-size 1 --pgs 64 --failure-domain osd "${C[@]}"
"$P" pool create size3 --size 3 --min-size 2 --pgs 64 --failure-domain osd "${C[@]}"
"$P" volume create v1 --size 1G --pool size1 "${C[@]}"
"$P" volume create v3 --size 1G --pool size3 "${C[@]}"
host=nqn.2026-11.io.pontoon:host-paths
for v in v1 v3; do
  "$P" bench --volume "$v" --fill --bs 4M --qd 4 "${C[@]}"
  nvmf_export "$P" "$host" "$v" "${C[@]}"
done
for _ in $(seq 1 40); do nbdinfo "nbd://127.0.0.1:$nbd_port/v1" >/dev/null 2>&1 && break; sleep 0.25; done

run_path() { # path name rw qd pool round
  local path=$1 name=$2 rw=$3 qd=$4 pool=$5 r=$6
  local f="$out/$path-$name.r$r.json"
  echo "-- $name round $r: $path"
  case "$path" in
    lib) "$P" bench --volume "v$pool" --rw "$rw" --bs 4k --qd "$qd" --time "${time}s" --json "${C[@]}" > "$f" ;;
    fio) fio --name=engine --ioengine="external:$ENGINE" --pontoon_cluster="$dir/cluster" --filename="v$pool" \
             --rw="$rw" --iodepth="$qd" "${FIO_COMMON[@]}" --output="$f" ;;
    nbd) fio --name=nbd --ioengine=nbd --uri="nbd://127.0.0.1:$nbd_port/v$pool" --size=1G \
             --rw="$rw" --iodepth="$qd" "${FIO_COMMON[@]}" --output="$f" ;;
    nvmf) "$P" bench --nvmf 127.0.0.1:$nvmf_port --nqn "nqn.2026-11.io.pontoon:v$pool" --hostnqn "$host" \
             --rw "$rw" --bs 4k --qd "$qd" --time "${time}s" --json "${C[@]}" > "$f" ;;
  esac
}
for t in "${TESTS[@]}"; do
  read -r name rw qd pool <<<"$t"
  [ -z "$only" ] || [[ "$only" == *",$name,"* ]] || continue
  for r in $(seq 1 "$rounds"); do
    # every round in another order: lib fio nbd nvmf, then fio nbd nvmf lib, ...
    order=(lib fio nbd nvmf)
    for k in $(seq 0 3); do
      run_path "${order[$(( (k + r - 1) % 4 ))]}" "$name" "$rw" "$qd" "$pool" "$r"
    done
  done
done
cleanup; up_pid=""
rm -rf "$dir/cluster"
echo "results: $out"

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
import glob, statistics
def fio_one(path):
    j = json.load(open(path))["jobs"][0]
    side = j["write"] if j["write"]["io_bytes"] > 0 else j["read"]
    lat = side["lat_ns"]; pct = lat.get("percentile") or side["clat_ns"]["percentile"]
    ios = side["total_ios"] or 1
    cpu = (j["usr_cpu"] + j["sys_cpu"]) / 100 * j["job_runtime"] / 1000 / ios * 1e6
    return dict(iops=side["iops"], mean=lat["mean"] / 1000, p50=pct["50.000000"] / 1000,
                p99=pct["99.000000"] / 1000, p999=pct["99.900000"] / 1000, cpu=cpu)
def bench_one(path):
    r = json.load(open(path))
    return dict(iops=r["iops"], mean=r["mean_us"], p50=r["p50_us"], p99=r["p99_us"],
                p999=r["p999_us"], cpu=r["client_cpu_us_per_io"])
def median(one, stem):
    """Each figure's median over the rounds of OUT/STEM.r*.json (or OUT/STEM.json)."""
    files = sorted(glob.glob(os.path.join(out, stem + ".r*.json"))) or [os.path.join(out, stem + ".json")]
    runs = [one(f) for f in files]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}
fio_row = lambda stem: median(fio_one, stem)
bench_row = lambda stem: median(bench_one, stem)
tests = [t for t in ["size1-randread-qd1", "size1-randread-qd32", "size3-randread-qd1",
                     "size3-randread-qd32", "size3-randwrite-qd1", "size3-randwrite-qd32"]
         if glob.glob(os.path.join(out, f"lib-{t}*.json"))]
paths = [("lib", "pontoon bench", bench_row), ("fio", "fio+engine", fio_row),
         ("nbd", "fio+nbd", fio_row), ("nvmf", "nvmf bench", bench_row)]
print()
rounds = len(glob.glob(os.path.join(out, f"lib-{tests[0]}.r*.json"))) or 1
print(f"4 KiB random I/O by host path, same cluster and volumes, medians of {rounds} round(s). Latency in µs")
print("(fio: total latency, submission to completion); x lib = IOPS / pontoon bench's; Δmean = mean")
print("latency minus pontoon bench's; x p99, x p99.9 = over pontoon bench's; cpu = client CPU µs per I/O")
print(f"{'test':22} {'path':14} {'IOPS':>8} {'x lib':>6} {'mean':>7} {'Δmean':>7} {'p50':>6} {'p99':>7} {'p99.9':>7} {'x p99':>6} {'x p99.9':>7} {'cpu':>6}")
for t in tests:
    rw, qd = t.split("-", 1)[1].rsplit("-qd", 1)
    base = bench_row(f"lib-{t}")
    for key, label, fn in paths:
        r = fn(f"{key}-{t}")
        print(f"{t:22} {label:14} {r['iops']:8.0f} {r['iops']/base['iops']:6.2f} {r['mean']:7.1f} {r['mean']-base['mean']:+7.1f} {r['p50']:6.0f} {r['p99']:7.0f} {r['p999']:7.0f} {r['p99']/base['p99']:6.2f} {r['p999']/base['p999']:7.2f} {r['cpu']:6.1f}")
    raw = fio_row(f"raw-{rw}-qd{qd}")
    print(f"{t:22} {'raw file':14} {raw['iops']:8.0f} {raw['iops']/base['iops']:6.2f} {raw['mean']:7.1f} {raw['mean']-base['mean']:+7.1f} {raw['p50']:6.0f} {raw['p99']:7.0f} {raw['p999']:7.0f} {raw['p99']/base['p99']:6.2f} {raw['p999']/base['p999']:7.2f} {raw['cpu']:6.1f}")
print()
print("Targets for fio+engine: IOPS >= 0.95x pontoon bench at QD32; QD1 mean latency within 10 µs of it")
print("(medians; in brackets each round's figure against pontoon bench's of the same round)")
for t in tests:
    base = bench_row(f"lib-{t}"); r = fio_row(f"fio-{t}")
    per = [(fio_one(os.path.join(out, f"fio-{t}.r{i}.json")), bench_one(os.path.join(out, f"lib-{t}.r{i}.json")))
           for i in range(1, rounds + 1) if os.path.exists(os.path.join(out, f"fio-{t}.r{i}.json"))]
    if t.endswith("qd32"):
        ok = r["iops"] >= 0.95 * base["iops"]
        each = " ".join(f"{f['iops']/l['iops']:.2f}" for f, l in per)
        print(f"  {t:22} IOPS {r['iops']/base['iops']:.2f}x  {'ok' if ok else 'MISSED'}  [{each}]")
    else:
        ok = r["mean"] - base["mean"] <= 10
        each = " ".join(f"{f['mean']-l['mean']:+.0f}" for f, l in per)
        print(f"  {t:22} mean {r['mean']-base['mean']:+.1f} µs  {'ok' if ok else 'MISSED'}  [{each}]")
print("raw writes use --sync=dsync (durable when acknowledged, as Pontoon's writes are).")
PY
