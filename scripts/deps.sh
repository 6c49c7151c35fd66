#!/usr/bin/env bash
# Installs the Debian packages Pontoon's build, demo and tests use, when missing.
# Usage: scripts/deps.sh [build|demo|test]   (default: test, which needs everything)
set -euo pipefail
want=(protobuf-compiler libprotobuf-dev libssl-dev pkg-config etcd-server fio python3)
case "${1:-test}" in
  build) want=(protobuf-compiler libprotobuf-dev libssl-dev pkg-config) ;;
  demo) want+=(qemu-utils libnbd-bin jq curl) ;;
  test) want+=(qemu-utils libnbd-bin nbdkit nvme-cli openssl etcd-client curl qemu-system-x86 linux-image-amd64 busybox-static cpio gcc libc6-dev iproute2 nftables prometheus chromium lintian debootstrap) ;;
  *) echo "usage: $0 [build|demo|test]" >&2; exit 2 ;;
esac
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq || true
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
