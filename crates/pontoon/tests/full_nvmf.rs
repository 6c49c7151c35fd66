//! A full pool seen by the Linux kernel's NVMe/TCP initiator (the
//! vm-initiator guest) through the gateway of a real 3-OSD cluster
//! (`pontoon up --nvmf`): once every OSD is full, an O_DIRECT write that
//! needs new space fails with NVMe status Capacity Exceeded (generic 0x81),
//! which the kernel logs and turns into ENOSPC for the writer ("No space
//! left on device"), and leaves nothing behind; reading and overwriting the
//! blocks already written still work. When the full ratio is raised again,
//! the same write succeeds without reconnecting.
//!
//! The pool is made full by lowering the ratios below what 8 MiB of data
//! uses, not by writing hundreds of MiB. Our own initiator checks the
//! status code first, so a kernel failure can be told from a target one.
//!
//! Needs etcd and the vm-initiator harness (root, QEMU; one TCG boot).

mod common;

use common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pontoon_nvmf::initiator::Controller;
use serde_json::Value;

const NQN: &str = "nqn.2024-01.io.pontoon:full";
/// The host NQN the harness presents by default.
const VM_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
const MIB: u64 = 1 << 20;

/// The guest's test: connect, write where nothing was written (must fail
/// for lack of space), read and overwrite what was written, then wait for
/// the host to raise the full ratio and write again. Every result is a
/// `FULLTEST ...` line the host judges; the script itself fails only when
/// the harness cannot get that far.
const GUEST: &str = r#"#!/bin/sh
. /test/lib.sh
dev_sha() { dd if="$NVME_BDEV" bs=1M skip="$1" count="$2" iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1; }
file_sha() { dd if="$1" bs=1M skip="$2" count="$3" 2>/dev/null | sha256sum | cut -d' ' -f1; }
dd_err() { grep -v 'records \(in\|out\)' /tmp/dd.err | tr '\n' ' '; }
nvme_connect "nqn=$NQN,transport=tcp,traddr=10.0.2.2,trsvcid=$PORT,hostnqn=$HOSTNQN,hostid=$(nvme_hostid "$HOSTNQN"),nr_io_queues=1"
nvme_find_ns 1
zero1=$(dd if=/dev/zero bs=1M count=1 2>/dev/null | sha256sum | cut -d' ' -f1)
zero8=$(dd if=/dev/zero bs=1M count=8 2>/dev/null | sha256sum | cut -d' ' -f1)

step "O_DIRECT write of 1 MiB at 32 MiB (never written) into the full pool"
must dd if=/dev/urandom of=/tmp/new.bin bs=1M count=1 2>/dev/null
n0=$(dmesg | wc -l)
dd if=/tmp/new.bin of="$NVME_BDEV" bs=1M seek=32 count=1 oflag=direct conv=notrunc 2>/tmp/dd.err
rc=$?
log "FULLTEST new-write rc=$rc err=$(dd_err)"
dmesg | tail -n +$((n0 + 1)) | sed 's/^/FULLTEST dmesg: /'
if [ "$(dev_sha 32 1)" = "$zero1" ]; then log "FULLTEST unwritten zero=yes"; else log "FULLTEST unwritten zero=no"; fi

step "O_DIRECT read of the first 8 MiB (written by the host)"
echo 3 > /proc/sys/vm/drop_caches
dd if="$NVME_BDEV" of=/tmp/before.bin bs=1M count=8 iflag=direct 2>/tmp/dd.err
rc=$?
z=no; [ "$(file_sha /tmp/before.bin 0 8)" = "$zero8" ] && z=yes
log "FULLTEST read rc=$rc zero=$z err=$(dd_err)"
rest0=$(file_sha /tmp/before.bin 1 7)

step "O_DIRECT overwrite of the first 1 MiB"
must dd if=/dev/urandom of=/tmp/over.bin bs=1M count=1 2>/dev/null
want=$(file_sha /tmp/over.bin 0 1)
n0=$(dmesg | wc -l)
dd if=/tmp/over.bin of="$NVME_BDEV" bs=1M count=1 oflag=direct conv=notrunc,fsync 2>/tmp/dd.err
rc=$?
err=$(dd_err)
dmesg | tail -n +$((n0 + 1)) | sed 's/^/FULLTEST dmesg: /'
echo 3 > /proc/sys/vm/drop_caches
m=mismatch; [ "$(dev_sha 0 1)" = "$want" ] && m=match
r=changed; [ "$(dev_sha 1 7)" = "$rest0" ] && r=unchanged
log "FULLTEST overwrite rc=$rc readback=$m rest=$r err=$err"

step "wait for the host to raise the full ratio, then write at 32 MiB again"
log "FULLTEST-WAITING"
i=0
while :; do
	i=$((i + 1))
	dd if=/tmp/new.bin of="$NVME_BDEV" bs=1M seek=32 count=1 oflag=direct conv=notrunc,fsync 2>/tmp/dd.err && { rc=0; break; }
	rc=$?
	[ $i -ge 90 ] && break
	sleep 1
done
m=mismatch; [ "$(dev_sha 32 1)" = "$(file_sha /tmp/new.bin 0 1)" ] && m=match
log "FULLTEST after-raise rc=$rc attempts=$i readback=$m err=$(dd_err)"
nvme_delete
log "FULLTEST-DONE"
exit 0
"#;

/// The OSDs of `pontoon df --json`.
fn osds(df: &Value) -> Vec<Value> {
    df["osds"].as_array().cloned().unwrap_or_default()
}

/// Sets the three ratios in an order that keeps nearfull <= backfillfull
/// <= full at every step (down: nearfull first; up: full first).
fn set_ratios(dir: &Path, nearfull: f64, backfillfull: f64, full: f64, down: bool) {
    let mut steps = [
        ("set-nearfull-ratio", nearfull),
        ("set-backfillfull-ratio", backfillfull),
        ("set-full-ratio", full),
    ];
    if !down {
        steps.reverse();
    }
    for (cmd, r) in steps {
        ok(dir, &["osd", cmd, &format!("{r:.4}")]);
    }
}

/// The guest's `FULLTEST <what> ...` line, or a failure showing the run.
fn marker<'a>(out: &'a str, what: &str, report: &dyn Fn() -> String) -> &'a str {
    let key = format!("FULLTEST {what} ");
    out.lines()
        .find(|l| l.contains(&key))
        .unwrap_or_else(|| panic!("the guest printed no `{key}` line:\n{}", report()))
}

/// The serial log of the run of the script named `name`, once it exists.
fn guest_log(name: &str) -> Option<PathBuf> {
    let cache = std::env::var("CACHE_DIR").unwrap_or_else(|_| "/var/tmp/vm-initiator".into());
    std::fs::read_dir(Path::new(&cache).join("logs"))
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(name))
        .map(|e| e.path())
}

#[test]
fn a_full_pool_refuses_new_space_to_the_kernel_initiator_with_capacity_exceeded() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-full-nvmf-");
    let dir = dir.as_path();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut up = Up::start_sized(dir, 3, "256M", &["--nvmf", &addr.to_string()]);
    eprintln!("cluster ready after {:?}", started.elapsed());
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
    ok(
        dir,
        &["volume", "create", "v", "--size", "64M", "--pool", "p"],
    );
    ok(dir, &["nvmf", "subsystem", "add", NQN]);
    assert_eq!(
        ok(dir, &["nvmf", "ns", "add", NQN, "v", "--nsid", "1"]),
        "1\n"
    );
    ok(dir, &["nvmf", "host", "allow", NQN, VM_HOST]);

    // The first 8 MiB, written through the client library.
    ok(
        dir,
        &[
            "bench", "--volume", "v", "--fill", "--span", "8M", "--bs", "1M", "--qd", "4",
        ],
    );
    // Every OSD holds a copy once its report shows it.
    let df = wait_json(
        dir,
        &["df", "--json"],
        "8 MiB used on every OSD",
        WAIT,
        |v| {
            let o = osds(v);
            o.len() == 3
                && o.iter()
                    .all(|o| o["used_bytes"].as_u64().unwrap_or(0) >= 8 * MIB)
        },
    );
    let least = osds(&df)
        .iter()
        .filter_map(|o| o["used_ratio"].as_f64())
        .fold(f64::INFINITY, f64::min);
    eprintln!("after the 8 MiB fill (least used ratio {least:.4}): {df:#}");
    assert!(least > 0.0 && least < 0.5, "{df:#}");
    // Full just below what is used now: every OSD is full.
    let full = least * 0.8;
    set_ratios(dir, full * 0.5, full * 0.75, full, true);
    let df = wait_json(dir, &["df", "--json"], "every OSD full", WAIT, |v| {
        let o = osds(v);
        o.len() == 3 && o.iter().all(|o| o["state"] == "full")
    });
    eprintln!("full after {:?}: {df:#}", started.elapsed());

    // Our own initiator first: the status the target sends.
    let mut c = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match Controller::connect(addr, NQN, VM_HOST, 1, 32, Default::default()) {
                Ok(c) => break c,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "the gateway did not serve {NQN} within 20 s: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    };
    let bs = c
        .identify_namespace(1)
        .expect("identify namespace 1")
        .block_size()
        .expect("a block size");
    let nlb = u32::try_from(4096 / bs).expect("blocks");
    let err = c
        .io(0)
        .write(1, 40 * MIB / bs, &[0x5a; 4096], false)
        .expect_err("a write needing new space into a full pool must fail");
    let status = err.status();
    eprintln!("our initiator's write at 40 MiB: {err} (status {status:?})");
    assert!(
        status.is_some_and(|s| s.sct == 0 && s.sc == 0x81),
        "the target answered a write into the full pool with {status:?} ({err}), not Capacity \
         Exceeded (generic 0x81)"
    );
    let old = c.io(0).read(1, 0, nlb).expect("read of written blocks");
    c.io(0)
        .write(1, 0, &old, false)
        .expect("an overwrite of written blocks");
    let _ = c.shutdown();

    // The kernel, in the guest; the host raises the ratio when it waits.
    let script_dir = tempfile::tempdir().expect("tempdir for the guest script");
    let name = format!(
        "full-nvmf-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let script = script_dir.path().join(format!("{name}.sh"));
    std::fs::write(&script, GUEST).expect("write the guest script");
    let args = vec![
        format!("PORT={}", addr.port()),
        format!("NQN={NQN}"),
        format!("HOSTNQN={VM_HOST}"),
    ];
    let script_path = script.to_string_lossy().into_owned();
    let vm = std::thread::spawn(move || {
        pontoon_testtools::run_vm(&script_path, &args, Duration::from_secs(420))
    });
    let mut raised = false;
    while !vm.is_finished() {
        if !raised
            && guest_log(&name)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .is_some_and(|t| t.contains("FULLTEST-WAITING"))
        {
            eprintln!(
                "guest waits after {:?}: raising the ratios",
                started.elapsed()
            );
            set_ratios(dir, 0.85, 0.90, 0.95, false);
            wait_json(dir, &["df", "--json"], "no OSD full", WAIT, |v| {
                osds(v).iter().all(|o| o["state"] != "full")
            });
            raised = true;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let r = vm.join().expect("the VM thread");
    let out = r.stdout.clone();
    let report = || r.report();
    eprintln!(
        "guest done after {:?}; its FULLTEST lines:",
        started.elapsed()
    );
    for l in out.lines().filter(|l| l.contains("FULLTEST")) {
        eprintln!("  {l}");
    }

    let new = marker(&out, "new-write", &report);
    assert!(
        !new.contains("rc=0 "),
        "the kernel's write needing new space into the full pool succeeded: {new}\n{}",
        report()
    );
    assert!(
        new.contains("No space left on device"),
        "the writer did not see ENOSPC: {new}\n{}",
        report()
    );
    let dmesg: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("FULLTEST dmesg:"))
        .collect();
    assert!(
        dmesg
            .iter()
            .any(|l| l.contains("sc 0x81") || l.contains("Capacity Exceeded")),
        "the kernel did not log status 0x81 / Capacity Exceeded: {dmesg:#?}\n{}",
        report()
    );
    let zero = marker(&out, "unwritten", &report);
    assert!(
        zero.contains("zero=yes"),
        "the refused write left data behind: {zero}"
    );
    let read = marker(&out, "read", &report);
    assert!(
        read.contains("rc=0 ") && read.contains("zero=no"),
        "reading the written blocks of the full pool failed: {read}\n{}",
        report()
    );
    let over = marker(&out, "overwrite", &report);
    assert!(
        over.contains("rc=0 ")
            && over.contains("readback=match")
            && over.contains("rest=unchanged"),
        "overwriting written blocks of the full pool failed: {over}\n{}",
        report()
    );
    assert!(
        raised,
        "the guest never waited for the ratio:\n{}",
        report()
    );
    let after = marker(&out, "after-raise", &report);
    assert!(
        after.contains("rc=0 ") && after.contains("readback=match"),
        "the write at 32 MiB still failed after the full ratio was raised: {after}\n{}",
        report()
    );
    assert!(
        pontoon_testtools::vm_passed(&r),
        "the guest test failed:\n{}",
        report()
    );
    assert!(up.stop().success());
    eprintln!("done after {:?}", started.elapsed());
}
