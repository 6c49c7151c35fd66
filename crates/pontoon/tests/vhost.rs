//! `pontoon vhost` seen by the Linux kernel's virtio-blk driver (the
//! vm-initiator guest, QEMU's vhost-user-blk-pci device) on size-3 volumes
//! of a real 3-OSD cluster:
//! - the harness's virtio-blk test (O_DIRECT write and read-back after a
//!   cache drop, discard reading back zeros, flushes) on two disks served by
//!   one `pontoon vhost` process with two queues each; then each whole disk
//!   as the guest read it equals the volume read through NBD (nbdcopy);
//! - the backend killed with SIGKILL and restarted while the guest writes:
//!   QEMU reconnects (`reconnect-ms`), every write completes and the data
//!   reads back exactly.
//!
//! Needs etcd, nbdcopy and the vm-initiator harness (root, QEMU; two TCG
//! boots).

mod common;

use common::*;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pontoon_testtools::{run_vm_env, vm_initiator, vm_passed};

/// A `pontoon vhost` process, killed on drop.
struct Vhost {
    child: Child,
}

impl Vhost {
    /// Starts `pontoon vhost` on `pairs` (socket, volume) and waits until
    /// every socket listens.
    fn start(dir: &Path, pairs: &[(&Path, &str)], log: &Path) -> Vhost {
        let mut cmd = Command::new(PONTOON);
        cmd.arg("vhost").arg("--cluster").arg(dir);
        for (socket, volume) in pairs {
            cmd.arg("--socket").arg(socket).args(["--volume", volume]);
        }
        let out = std::fs::File::create(log).expect("vhost log");
        let err = out.try_clone().expect("vhost log");
        for (socket, _) in pairs {
            let _ = std::fs::remove_file(socket);
        }
        let child = cmd
            .args(["--queues", "2"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("run pontoon vhost");
        let mut v = Vhost { child };
        let deadline = Instant::now() + WAIT;
        let serving = || {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .matches("vhost: serving volume")
                .count()
        };
        while serving() < pairs.len() {
            if let Ok(Some(status)) = v.child.try_wait() {
                panic!(
                    "pontoon vhost exited ({status}):\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "pontoon vhost did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        v
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A size-3 pool `p` and its volumes.
fn volumes(dir: &Path, vols: &[(&str, &str)]) {
    ok(
        dir,
        &[
            "pool",
            "create",
            "p",
            "--size",
            "3",
            "--pgs",
            "16",
            "--failure-domain",
            "osd",
        ],
    );
    for (name, size) in vols {
        ok(
            dir,
            &["volume", "create", name, "--size", size, "--pool", "p"],
        );
    }
}

/// The sha256 of a whole volume read through the NBD gateway with nbdcopy.
fn nbd_sha256(addr: SocketAddr, volume: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; nbdcopy nbd://{addr}/{volume} - | sha256sum | cut -d' ' -f1"
        ))
        .output()
        .expect("run nbdcopy");
    assert!(
        out.status.success(),
        "nbdcopy of {volume} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A unique name for a guest script, so its serial log can be found.
fn script_name(what: &str) -> String {
    format!(
        "{what}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    )
}

#[test]
fn the_kernel_virtio_blk_driver_writes_verifies_discards_and_flushes_through_vhost() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-vhost-");
    let dir = dir.as_path();
    let nbd = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _up = Up::start_sized(dir, 3, "256M", &["--nbd", &nbd.to_string()]);
    volumes(dir, &[("vm1", "48M"), ("vm2", "32M")]);
    let (s1, s2) = (dir.join("vm1.sock"), dir.join("vm2.sock"));
    let mut vhost = Vhost::start(dir, &[(&s1, "vm1"), (&s2, "vm2")], &dir.join("vhost.log"));
    eprintln!("cluster and backend ready after {:?}", started.elapsed());

    // The harness's own test, then each whole disk's sha256 as the guest
    // reads it.
    let stock = std::fs::read_to_string(vm_initiator().join("tests/virtio-blk.sh"))
        .expect("the harness's virtio-blk test");
    let body = stock
        .trim_end()
        .strip_suffix("exit 0")
        .expect("virtio-blk.sh ends with exit 0");
    let script = format!(
        "{body}\nfor d in $DEV; do log \"DEVSHA $d $(dd if=$d bs=1M iflag=direct 2>/dev/null | \
         sha256sum | cut -d' ' -f1)\"; done\nexit 0\n"
    );
    let sdir = tempfile::tempdir().expect("script dir");
    let path = sdir.path().join(format!("{}.sh", script_name("vhost-blk")));
    std::fs::write(&path, script).expect("write the guest script");
    let sockets = format!("{} {}", s1.display(), s2.display());
    let r = run_vm_env(
        &path.to_string_lossy(),
        &[
            "DEV=/dev/vda /dev/vdb".into(),
            "TRIM=1".into(),
            "TRIM_ZEROES=1".into(),
            "QUEUES=2".into(),
            "SIZE_MB=8".into(),
        ],
        &[("VM_VHOST_BLK", &sockets), ("VM_VHOST_QUEUES", "2")],
        Duration::from_secs(300),
    );
    eprintln!("guest done after {:?}", started.elapsed());
    assert!(
        vm_passed(&r),
        "the guest's virtio-blk test failed:\n{}",
        r.report()
    );
    assert!(vhost.alive(), "pontoon vhost died during the run");

    for (dev, vol) in [("/dev/vda", "vm1"), ("/dev/vdb", "vm2")] {
        let key = format!("DEVSHA {dev} ");
        let guest = r
            .stdout
            .lines()
            .find_map(|l| l.split_once(&key).map(|(_, s)| s.trim().to_string()))
            .unwrap_or_else(|| panic!("no `{key}` line:\n{}", r.report()));
        assert_eq!(guest.len(), 64, "{guest:?}");
        let host = nbd_sha256(nbd, vol);
        assert_eq!(
            guest, host,
            "{vol} as the guest read it through vhost differs from what NBD reads"
        );
        eprintln!("{vol}: guest and NBD both read sha256 {host}");
    }
    eprintln!("done after {:?}", started.elapsed());
}

/// The guest: two random 16 MiB patterns written alternately over the same
/// region with O_DIRECT, pass after pass for 14 s of guest time (the host
/// kills and restarts the backend meanwhile), the last pass B; then every
/// byte must read back as B.
const RESTART_GUEST: &str = r#"#!/bin/sh
. /test/lib.sh
DEV=/dev/vdb
step "wait for $DEV"
wait_for "$DEV" 10 || fail "$DEV missing"
must dd if=/dev/urandom of=/tmp/a.bin bs=1M count=16 2>/dev/null
must dd if=/dev/urandom of=/tmp/b.bin bs=1M count=16 2>/dev/null
log "RESTART-WRITING"
end=$(( $(cut -d. -f1 /proc/uptime) + 14 ))
pass=0
while [ "$(cut -d. -f1 /proc/uptime)" -lt "$end" ]; do
	f=/tmp/a.bin; [ $((pass % 2)) = 1 ] && f=/tmp/b.bin
	dd if=$f of="$DEV" bs=1M count=16 oflag=direct conv=notrunc 2>/tmp/dd.err || { cat /tmp/dd.err; fail "write pass $pass failed"; }
	pass=$((pass + 1))
done
must dd if=/tmp/b.bin of="$DEV" bs=1M count=16 oflag=direct conv=notrunc 2>/dev/null
log "RESTART-PASSES $pass"
echo 3 > /proc/sys/vm/drop_caches
want=$(sha256sum < /tmp/b.bin | cut -d' ' -f1)
got=$(dd if="$DEV" bs=1M count=16 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
[ "$want" = "$got" ] || fail "read back $got, wrote $want"
ok "16 MiB read back exactly after $pass passes"
exit 0
"#;

#[test]
fn a_backend_killed_and_restarted_under_writes_loses_nothing() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-vhost-restart-");
    let dir = dir.as_path();
    let _up = Up::start_sized(dir, 3, "256M", &[]);
    volumes(dir, &[("steady", "16M"), ("target", "32M")]);
    // The harness's own disk (its socket gives the guest shared memory),
    // served by a backend that stays up; the disk under test is added with
    // a reconnecting chardev and served by a second backend.
    let steady_sock = dir.join("steady.sock");
    let target_sock = dir.join("target.sock");
    let _steady = Vhost::start(dir, &[(&steady_sock, "steady")], &dir.join("steady.log"));
    let log = dir.join("target.log");
    let mut target = Vhost::start(dir, &[(&target_sock, "target")], &log);
    let name = script_name("vhost-restart");
    let sdir = tempfile::tempdir().expect("script dir");
    let path = sdir.path().join(format!("{name}.sh"));
    std::fs::write(&path, RESTART_GUEST).expect("write the guest script");
    let serial = dir.join("serial.log");
    let qemu_args = format!(
        "-chardev socket,id=rc0,path={},reconnect=1 \
         -device vhost-user-blk-pci,chardev=rc0,num-queues=2",
        target_sock.display()
    );
    let (path_s, serial_s, steady_s) = (
        path.to_string_lossy().into_owned(),
        serial.to_string_lossy().into_owned(),
        steady_sock.to_string_lossy().into_owned(),
    );
    let vm = std::thread::spawn(move || {
        run_vm_env(
            &path_s,
            &[],
            &[
                ("VM_VHOST_BLK", &steady_s),
                ("VM_QEMU_ARGS", &qemu_args),
                ("VM_LOG", &serial_s),
            ],
            Duration::from_secs(300),
        )
    });
    let mut restarted = false;
    while !vm.is_finished() {
        if !restarted
            && std::fs::read_to_string(&serial).is_ok_and(|t| t.contains("RESTART-WRITING"))
        {
            std::thread::sleep(Duration::from_millis(2500));
            eprintln!(
                "guest writing; SIGKILL to the backend (pid {}) after {:?}",
                target.pid(),
                started.elapsed()
            );
            signal(target.pid(), libc::SIGKILL);
            let _ = target.child.wait();
            std::thread::sleep(Duration::from_secs(1));
            target = Vhost::start(dir, &[(&target_sock, "target")], &dir.join("target2.log"));
            eprintln!("backend restarted (pid {})", target.pid());
            restarted = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = vm.join().expect("the VM thread");
    assert!(
        restarted,
        "the guest never started writing:\n{}",
        r.report()
    );
    assert!(
        vm_passed(&r),
        "the guest's writes failed or did not verify:\n{}",
        r.report()
    );
    let passes = r
        .stdout
        .lines()
        .find_map(|l| {
            l.split_once("RESTART-PASSES ")
                .map(|(_, n)| n.trim().to_string())
        })
        .unwrap_or_default();
    let log2 = std::fs::read_to_string(dir.join("target2.log")).unwrap_or_default();
    assert!(
        log2.contains("front-end connected"),
        "QEMU never reconnected to the restarted backend:\n{log2}"
    );
    eprintln!(
        "{passes} write passes of 16 MiB across the restart; verified after {:?}",
        started.elapsed()
    );
}
