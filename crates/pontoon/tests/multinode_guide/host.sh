#!/bin/bash
# One server of tests/multinode_guide.rs, entered as
#   ip netns exec NETNS unshare --mount --uts --propagation private host.sh DIR NAME DEVS
# so it already has its own network (the testbed's namespace) and its own
# mount and host-name namespaces. It becomes a Debian machine of its own:
#   /            an overlay: the machine's root below, DIR/upper above (what
#                dpkg, apt and the guide write lands there, nowhere else)
#   /dev         a tmpfs with the usual character devices and the host's
#                data drives: DEVS is "nvme0n1=7:3 nvme1n1=7:4" (name=major:minor
#                of the loop device standing in for it), root:disk 0660
#   /run         DIR/run (the systemctl stand-in's pid files, seen by the test)
#   /proc, /sys  the kernel's
# and its host name is NAME. Then it runs bash reading commands from stdin,
# as root in /root, with a login-like clean environment.
set -euo pipefail
dir=$1 name=$2 devs=$3
root=$dir/root

hostname "$name"
mount -t overlay overlay -o "lowerdir=/,upperdir=$dir/upper,workdir=$dir/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount -t tmpfs -o mode=0755,nosuid dev "$root/dev"
for n in null zero full random urandom tty; do cp -a "/dev/$n" "$root/dev/"; done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir "$root/dev/shm" "$root/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
for d in $devs; do
  node=${d%%=*} mm=${d#*=}
  mknod -m 0660 "$root/dev/$node" b "${mm%%:*}" "${mm#*:}"
  chgrp disk "$root/dev/$node"
done
mount --bind "$dir/run" "$root/run"
mount -t tmpfs -o mode=1777 tmp "$root/tmp"

exec chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root TERM=dumb LANG=C.UTF-8 \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/bash --noprofile --norc -c 'cd /root && exec /bin/bash --noprofile --norc -s'
