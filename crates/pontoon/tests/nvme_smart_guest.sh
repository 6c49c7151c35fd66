#!/bin/sh
# Guest side of crates/pontoon/tests/nvme_smart.rs (run by the vm-initiator
# harness as /test/run.sh, busybox ash).
#
# $PAYLOAD is a read-only virtio disk holding a tar of the host's `pontoon`
# binary, its shared libraries (run through their own ld-linux, as the
# initramfs has no libc) and modules/<kver>/nvme.ko: the harness's initramfs
# loads nvme-core but not the NVMe PCI driver. $NVME is the namespace of
# QEMU's emulated NVMe controller.
#
# Prints the wear as `pontoon osd smart --json` reads it before and after
# writing $WRITE_MB MiB with O_DIRECT, each JSON on one line after a marker
# (SMART-BEFORE / SMART-AFTER) for the host to judge.
. /test/lib.sh
PAYLOAD=${PAYLOAD:-/dev/vda}
NVME=${NVME:-/dev/nvme0n1}
WRITE_MB=${WRITE_MB:-64}
P=/tmp/p

pontoon() { "$P/ld-linux-x86-64.so.2" --library-path "$P" "$P/pontoon" "$@"; }

# smart MARKER: one `osd smart --json` reading on one line after MARKER.
smart() {
	out=$(pontoon osd smart --device "$NVME" --json 2>/tmp/smart.err) || {
		cat /tmp/smart.err
		fail "pontoon osd smart --device $NVME --json failed"
	}
	echo "$1 $(echo "$out" | tr -d '\n')"
}

step "unpack the pontoon payload from $PAYLOAD"
wait_for "$PAYLOAD" 10 || fail "$PAYLOAD missing (virtio_blk not loaded?)"
mkdir -p "$P"
must tar xf "$PAYLOAD" -C "$P"
ls -l "$P"

step "NVMe PCI driver"
if [ -d /sys/module/nvme ]; then
	log "     nvme already loaded (built in or in the initramfs)"
else
	mod=$P/modules/$(uname -r)/nvme.ko
	[ -f "$mod" ] || fail "no NVMe PCI driver: $mod is not in the payload"
	must insmod "$mod"
	log "     loaded $mod"
fi
wait_for "$NVME" 10 || fail "$NVME did not appear"
for a in model serial firmware_rev; do
	log "     $a = $(cat /sys/block/${NVME##*/}/device/$a 2>/dev/null)"
done
log "     size = $(blockdev --getsize64 "$NVME") bytes"

step "wear before writing"
smart SMART-BEFORE
pontoon osd smart --device "$NVME" || fail "pontoon osd smart (text) failed"

step "write ${WRITE_MB} MiB to $NVME with O_DIRECT"
t0=$(cut -d' ' -f1 /proc/uptime)
dd if=/dev/zero of="$NVME" bs=1M count="$WRITE_MB" oflag=direct conv=fsync 2>/tmp/dd.err \
	|| { cat /tmp/dd.err; fail "writing $NVME"; }
t1=$(cut -d' ' -f1 /proc/uptime)
log "     wrote ${WRITE_MB} MiB in $(awk "BEGIN{printf \"%.2fs\", $t1-$t0}")"

step "wear after writing"
smart SMART-AFTER
pontoon osd smart --device "$NVME" || fail "pontoon osd smart (text) failed"

step "a block device that is not NVMe is refused"
if pontoon osd smart --device "$PAYLOAD" >/tmp/no.out 2>/tmp/no.err; then
	cat /tmp/no.out
	fail "pontoon osd smart accepted $PAYLOAD"
fi
log "     NOT-NVME $(cat /tmp/no.err)"
grep -q "is not an NVMe namespace" /tmp/no.err || fail "unclear refusal: $(cat /tmp/no.err)"
ok "SMART read before and after writing ${WRITE_MB} MiB"
exit 0
