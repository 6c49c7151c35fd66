#!/usr/bin/env bash
# The cost of TLS on the NBD gateway, plain and TLS side by side in one
# run: a local one-OSD cluster, one size-1 volume, and one `pontoon nbd
# --tls on` that serves plain clients, PSK clients and x509 clients on the
# same port. For each of plain / PSK / x509 it measures
#  - nbdcopy of a 512 MiB file into the volume and of the volume to null:
#    (MiB/s, and the gateway's CPU milliseconds per GiB);
#  - nbdcopy with 4 KiB requests, 32 in flight on one connection, into and
#    out of a 64 MiB volume (16384 ops each way: ops/s and the gateway's
#    CPU microseconds per op).
# (fio's nbd engine has no TLS, and qemu-img bench takes no --object for
# TLS credentials, hence nbdcopy.)
#
# Usage: bench/nbd-tls.sh [--dir DIR]
#        PONTOON=target/ci/pontoon bench/nbd-tls.sh   (skip the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
dir=""; ops=16384
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    *) echo "usage: $0 [--dir DIR]" >&2; exit 2 ;;
  esac
done
scripts/deps.sh test >/dev/null
if [ -z "${PONTOON:-}" ]; then
  cargo build --release -p pontoon 2>&1 | tail -1
  PONTOON=$PWD/target/release/pontoon
fi
P=$PONTOON
[ -n "$dir" ] || dir=$(mktemp -d /var/tmp/pontoon-nbd-tls.XXXXXX)
mkdir -p "$dir/tls/admin" "$dir/tls/alice"
up_pid=""; gw_pid=""
cleanup() {
  [ -n "$gw_pid" ] && kill -TERM "$gw_pid" 2>/dev/null && wait "$gw_pid" 2>/dev/null
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null
  drop_osd_images "$dir"
  true
}
trap cleanup EXIT

echo "== credentials (openssl): CA, server and client certificates, a PSK for alice"
(
  cd "$dir/tls"
  k() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
  k ca-key.pem
  openssl req -x509 -new -key ca-key.pem -subj "/CN=bench CA" -days 2 -out ca-cert.pem
  for n in server client; do
    k $n-key.pem
    cn=localhost; ext="extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1"
    [ $n = client ] && cn=admin && ext="extendedKeyUsage=clientAuth"
    openssl req -new -key $n-key.pem -subj "/CN=$cn" -out $n.csr
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n%s\n' "$ext" > $n.ext
    openssl x509 -req -in $n.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
      -extfile $n.ext -out $n-cert.pem 2>/dev/null
  done
  cp ca-cert.pem client-cert.pem client-key.pem admin/
  echo "alice:$(openssl rand -hex 32)" > server.psk
  cp server.psk alice/keys.psk
)

echo "== pontoon up: 1 OSD of 2 GiB ($dir)"
"$P" up --dir "$dir/cluster" --osds 1 --osd-size 2G --shards 1 > "$dir/up.log" 2>&1 &
up_pid=$!
wait_cluster "$dir"
C=(--cluster "$dir/cluster")
"$P" pool create p --size 1 --pgs 16 "${C[@]}" >/dev/null
"$P" volume create v --size 1G --pool p "${C[@]}" >/dev/null
"$P" volume create s --size 64M --pool p "${C[@]}" >/dev/null
port=$(free_port)
"$P" nbd "${C[@]}" --listen 127.0.0.1:$port --metrics off --tls on \
  --tls-cert "$dir/tls/server-cert.pem" --tls-key "$dir/tls/server-key.pem" \
  --tls-ca "$dir/tls/ca-cert.pem" --tls-psk-file "$dir/tls/server.psk" > "$dir/nbd.log" 2>&1 &
gw_pid=$!
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
head -c $((512 << 20)) /dev/urandom > "$dir/src.raw"
head -c $((64 << 20)) /dev/urandom > "$dir/small.raw"

cpu_ms() { awk '{ print ($14 + $15) * 10 }' "/proc/$gw_pid/stat"; }   # USER_HZ = 100
now() { date +%s.%N; }
uri() {  # mode, volume
  case "$1" in
    plain) echo "nbd://127.0.0.1:$port/$2" ;;
    psk) echo "nbds://alice@127.0.0.1:$port/$2?tls-psk-file=$dir/tls/alice/keys.psk" ;;
    x509) echo "nbds://localhost:$port/$2?tls-certificates=$dir/tls/admin" ;;
  esac
}
measure() {  # label, command...
  local label=$1; shift
  local c0 t0 c1 t1
  c0=$(cpu_ms); t0=$(now)
  "$@" > "$dir/last.out" 2>&1 || { cat "$dir/last.out"; exit 1; }
  t1=$(now); c1=$(cpu_ms)
  echo "$label $t0 $t1 $c0 $c1"
}

results="$dir/results.txt"; : > "$results"
for mode in plain psk x509; do
  echo "== $mode"
  measure "$mode copy-in" nbdcopy "$dir/src.raw" "$(uri $mode v)" | tee -a "$results"
  measure "$mode copy-out" nbdcopy "$(uri $mode v)" null: | tee -a "$results"
  q=(--request-size=4096 --requests=32 --connections=1)
  measure "$mode 4k-write" nbdcopy "${q[@]}" "$dir/small.raw" "$(uri $mode s)" | tee -a "$results"
  measure "$mode 4k-read" nbdcopy "${q[@]}" "$(uri $mode s)" null: | tee -a "$results"
done
python3 - "$results" "$ops" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
ops = int(sys.argv[2])
res = {}
for mode, what, t0, t1, c0, c1 in rows:
    secs, cpu_ms = float(t1) - float(t0), float(c1) - float(c0)
    res[(mode, what)] = (secs, cpu_ms)
print()
print("| test | plain | PSK | x509 | PSK / plain |")
print("|---|---|---|---|---|")
for what, unit in [("copy-in", "MiB/s"), ("copy-out", "MiB/s"), ("4k-write", "ops/s"), ("4k-read", "ops/s")]:
    vals = []
    for mode in ("plain", "psk", "x509"):
        secs, _ = res[(mode, what)]
        vals.append(512 / secs if unit == "MiB/s" else ops / secs)
    print(f"| {what} ({unit}) | {vals[0]:.0f} | {vals[1]:.0f} | {vals[2]:.0f} | {vals[1] / vals[0]:.2f} |")
for what, unit in [("copy-in", "CPU ms/GiB"), ("copy-out", "CPU ms/GiB"), ("4k-write", "CPU us/op"), ("4k-read", "CPU us/op")]:
    vals = []
    for mode in ("plain", "psk", "x509"):
        _, cpu = res[(mode, what)]
        vals.append(cpu * 2 if unit == "CPU ms/GiB" else cpu * 1000 / ops)
    print(f"| {what} gateway ({unit}) | {vals[0]:.0f} | {vals[1]:.0f} | {vals[2]:.0f} | {vals[1] / max(vals[0], 1e-9):.2f} |")
EOF
