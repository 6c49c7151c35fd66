//! NVMe-oF from the CLI against a real local cluster (`pontoon up`, one
//! OSD, its own etcd): subsystems, namespaces and allowed hosts in the
//! cluster map, their listings and error cases; and the gateway `pontoon up
//! --nvmf ADDR` runs: it answers the NVMe/TCP handshake, serves the
//! namespace to an allowed host through `pontoon_nvmf::initiator` (data
//! written and read back, NGUID = the map's UUID), refuses other hosts,
//! follows allow-list and namespace changes without a restart, and stops
//! with the cluster.
//!
//! Needs etcd (Debian's etcd-server; scripts/deps.sh installs it).

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use pontoon_nvmf::initiator::{self, Controller};
use serde_json::Value;

const NQN: &str = "nqn.2024-01.io.pontoon:db";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:6c2a2b34-1c1e-4d7a-9f7e-4a1d2b3c4d5e";

/// Runs a command that must fail with `error: ...` on one line, exit 1,
/// mentioning every one of `wants`.
fn fails_with(dir: &Path, args: &[&str], wants: &[&str]) {
    let e = fails(dir, args, 1);
    assert!(e.starts_with("error: "), "{args:?}: {e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e}");
    for w in wants {
        assert!(e.contains(w), "{args:?}: {e:?} does not mention {w:?}");
    }
}

#[test]
fn subsystems_namespaces_and_hosts_are_managed_from_the_cli() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-nvmf-cli-");
    let dir = dir.as_path();
    let up = Up::start(dir, &[]);
    eprintln!("cluster ready after {:?}", started.elapsed());

    ok(dir, &["pool", "create", "p", "--size", "1", "--pgs", "8"]);
    ok(dir, &["volume", "create", "v", "--size", "64M"]);
    ok(dir, &["volume", "create", "w", "--size", "16M"]);

    assert_eq!(
        json(dir, &["nvmf", "subsystem", "ls", "--json"]),
        Value::Array(vec![])
    );
    assert!(ok(dir, &["nvmf", "subsystem", "ls"]).contains("no subsystems"));
    let out = ok(dir, &["nvmf", "subsystem", "add", NQN]);
    assert!(out.contains(&format!("subsystem {NQN} created")), "{out}");
    assert!(ok(dir, &["nvmf", "ns", "ls", NQN]).contains("no namespaces"));
    assert!(ok(dir, &["nvmf", "host", "ls", NQN]).contains("no hosts"));

    // `ns add` prints only the namespace id: the lowest free one, or the
    // one asked for.
    assert_eq!(ok(dir, &["nvmf", "ns", "add", NQN, "v"]), "1\n");
    assert_eq!(
        ok(dir, &["nvmf", "ns", "add", NQN, "w", "--nsid", "5"]),
        "5\n"
    );
    let ns = json(dir, &["nvmf", "ns", "ls", NQN, "--json"]);
    let list = ns.as_array().expect("an array of namespaces");
    assert_eq!(list.len(), 2, "{ns:#}");
    assert_eq!(list[0]["nsid"], 1, "{ns:#}");
    assert_eq!(list[0]["volume"], "v", "{ns:#}");
    assert_eq!(list[0]["size_bytes"], 64u64 << 20, "{ns:#}");
    assert_eq!(list[1]["nsid"], 5, "{ns:#}");
    assert_eq!(list[1]["volume"], "w", "{ns:#}");
    for n in list {
        let uuid = n["uuid"].as_str().expect("a uuid string");
        assert_eq!(uuid.len(), 36, "{uuid}");
        assert_eq!(uuid.matches('-').count(), 4, "{uuid}");
    }
    assert_ne!(list[0]["uuid"], list[1]["uuid"]);
    let text = ok(dir, &["nvmf", "ns", "ls", NQN]);
    assert!(text.contains("NSID") && text.contains(" v "), "{text}");

    let out = ok(dir, &["nvmf", "host", "allow", NQN, HOST]);
    assert!(out.contains(HOST), "{out}");
    assert_eq!(
        json(dir, &["nvmf", "host", "ls", NQN, "--json"]),
        serde_json::json!([{ "nqn": HOST, "dhchap": null }])
    );
    assert_eq!(ok(dir, &["nvmf", "host", "ls", NQN]), format!("{HOST}\n"));

    let subs = json(dir, &["nvmf", "subsystem", "ls", "--json"]);
    assert_eq!(subs[0]["nqn"], NQN, "{subs:#}");
    assert_eq!(
        subs[0]["namespaces"].as_array().map(Vec::len),
        Some(2),
        "{subs:#}"
    );
    assert_eq!(subs[0]["hosts"], serde_json::json!([HOST]), "{subs:#}");
    let text = ok(dir, &["nvmf", "subsystem", "ls"]);
    assert!(text.contains(NQN), "{text}");

    // Errors: one line, `error: ...`, exit 1; clap usage errors exit 2.
    fails_with(
        dir,
        &["nvmf", "subsystem", "add", NQN],
        &["already exists", NQN],
    );
    fails_with(
        dir,
        &["nvmf", "subsystem", "add", "iqn.2024-01.io.pontoon:x"],
        &["invalid subsystem NQN", "nqn."],
    );
    fails_with(
        dir,
        &[
            "nvmf",
            "subsystem",
            "add",
            "nqn.2014-08.org.nvmexpress.discovery",
        ],
        &["discovery"],
    );
    fails_with(
        dir,
        &["nvmf", "subsystem", "rm", "nqn.nope"],
        &["subsystem nqn.nope not found"],
    );
    fails_with(
        dir,
        &["nvmf", "ns", "add", "nqn.nope", "v"],
        &["subsystem nqn.nope not found"],
    );
    fails_with(
        dir,
        &["nvmf", "ns", "add", NQN, "ghost"],
        &["volume ghost not found"],
    );
    fails_with(
        dir,
        &["nvmf", "ns", "add", NQN, "v"],
        &["already namespace 1"],
    );
    fails_with(
        dir,
        &["nvmf", "ns", "add", NQN, "v", "--nsid", "0"],
        &["namespace id 0"],
    );
    fails_with(
        dir,
        &["nvmf", "ns", "ls", "nqn.nope"],
        &["subsystem nqn.nope not found"],
    );
    fails_with(
        dir,
        &["nvmf", "ns", "rm", NQN, "9"],
        &["namespace 9 of subsystem", "not found"],
    );
    fails_with(
        dir,
        &["nvmf", "host", "allow", NQN, "somehost"],
        &["invalid host NQN"],
    );
    fails_with(
        dir,
        &["nvmf", "host", "allow", NQN, HOST],
        &["already exists"],
    );
    fails_with(
        dir,
        &["nvmf", "host", "ls", "nqn.nope"],
        &["subsystem nqn.nope not found"],
    );
    fails_with(
        dir,
        &["nvmf", "host", "rm", NQN, "nqn.other"],
        &["nqn.other", "not found"],
    );
    // A volume exported as a namespace cannot be removed.
    fails_with(dir, &["volume", "rm", "v"], &["in use", "namespace 1", NQN]);
    fails(dir, &["nvmf", "ns", "rm", NQN, "one"], 2);
    fails(dir, &["nvmf", "ns", "add", NQN], 2);
    fails(
        dir,
        &["nvmf", "--listen", "127.0.0.1:1", "subsystem", "ls"],
        2,
    );

    // Undo it all.
    let out = ok(dir, &["nvmf", "host", "rm", NQN, HOST]);
    assert!(out.contains("removed"), "{out}");
    assert_eq!(
        json(dir, &["nvmf", "host", "ls", NQN, "--json"]),
        serde_json::json!([])
    );
    let out = ok(dir, &["nvmf", "ns", "rm", NQN, "5"]);
    assert!(
        out.contains("namespace 5") && out.contains("volume w"),
        "{out}"
    );
    ok(dir, &["volume", "rm", "w"]);
    let out = ok(dir, &["nvmf", "subsystem", "rm", NQN]);
    assert!(out.contains("1 namespace(s)"), "{out}");
    assert_eq!(
        json(dir, &["nvmf", "subsystem", "ls", "--json"]),
        Value::Array(vec![])
    );
    ok(dir, &["volume", "rm", "v"]);
    drop(up);
    eprintln!("done after {:?}", started.elapsed());
}

/// A loopback port free right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

#[test]
fn up_runs_an_nvme_tcp_gateway_that_follows_the_map() {
    let started = Instant::now();
    let (_tmp, dir) = tempdir("pontoon-nvmf-up-");
    let dir = dir.as_path();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut up = Up::start(dir, &["--nvmf", &addr.to_string()]);
    eprintln!("cluster with gateway ready after {:?}", started.elapsed());

    // `up` prints its endpoints right after writing cluster.toml.
    let line = format!("nvmf     nvme-tcp://{addr}");
    eventually("up to print the gateway's endpoint", || {
        std::fs::read_to_string(dir.join("up.out"))
            .ok()
            .filter(|p| p.contains(&line))
    });
    let gw = read_pid(&dir.join("run/nvmf.pid")).expect("run/nvmf.pid");
    assert!(alive(gw));
    assert!(dir.join("log/nvmf.log").exists());

    ok(dir, &["pool", "create", "p", "--size", "1", "--pgs", "8"]);
    ok(dir, &["volume", "create", "v", "--size", "16M"]);
    ok(dir, &["nvmf", "subsystem", "add", NQN]);
    assert_eq!(ok(dir, &["nvmf", "ns", "add", NQN, "v"]), "1\n");
    ok(dir, &["nvmf", "host", "allow", NQN, HOST]);

    // The NVMe/TCP connection handshake: ICReq in, ICResp (PDU type 0x01,
    // 128 bytes) out.
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let icreq = pontoon_nvmf::pdu::IcReq {
        pfv: 0,
        hpda: 0,
        digests: Default::default(),
        maxr2t: 0,
    }
    .encode();
    s.write_all(&icreq).expect("send ICReq");
    let mut resp = [0u8; 128];
    s.read_exact(&mut resp).expect("read ICResp");
    assert_eq!(resp[0], 0x01, "ICResp PDU type: {:02x?}", &resp[..8]);
    assert_eq!(resp[2], 128, "ICResp header length: {:02x?}", &resp[..8]);
    drop(s);

    through_the_initiator(dir, addr);

    // Stopping the cluster stops the gateway.
    let status = up.stop();
    assert!(status.success(), "pontoon up exited with {status}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(gw) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(gw), "the gateway outlived pontoon up");
    assert!(!dir.join("run/nvmf.pid").exists());
    drop(up);
    eprintln!("done after {:?}", started.elapsed());
}

/// Retries `f` (bounded) until it returns `Some`: the gateway follows the
/// map within about a second of a change.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 8 KiB of test data, different for every `i`.
fn pattern(i: usize) -> Vec<u8> {
    (0..8192usize).map(|b| (b ^ (i * 37 + 1)) as u8).collect()
}

/// A host connects to the subsystem through the gateway, sees the
/// namespace as the map describes it, writes and reads back blocks; a host
/// not on the allow-list is refused until it is allowed, and a namespace
/// added while the gateway runs appears.
fn through_the_initiator(dir: &Path, addr: SocketAddr) {
    let ns = json(dir, &["nvmf", "ns", "ls", NQN, "--json"]);
    let uuid: Vec<u8> = ns[0]["uuid"]
        .as_str()
        .expect("uuid")
        .chars()
        .filter(|c| *c != '-')
        .collect::<String>()
        .as_bytes()
        .chunks(2)
        .map(|h| u8::from_str_radix(std::str::from_utf8(h).unwrap(), 16).unwrap())
        .collect();

    // The gateway picks the configuration up from the map within a second.
    let entry = eventually("the subsystem is in the discovery log", || {
        let entries = initiator::discover(addr, HOST).expect("discovery");
        entries.into_iter().find(|e| e.subnqn == NQN)
    });
    assert_eq!(entry.trsvcid, addr.port().to_string(), "{entry:?}");

    let mut c = Controller::connect(addr, NQN, HOST, 1, 32, Default::default())
        .expect("an allowed host connects");
    assert_eq!(c.active_namespaces().expect("active namespaces"), vec![1]);
    let id = c.identify_namespace(1).expect("identify namespace 1");
    let bs = id.block_size().expect("a block size");
    assert_eq!(id.nsze * bs, 16 << 20, "namespace size: {id:?}");
    assert_eq!(
        id.nguid.as_slice(),
        uuid.as_slice(),
        "NGUID is the map's UUID"
    );
    // Blocks at the start, across the 4 MiB object boundary and at the end.
    let nlb = u32::try_from(8192 / bs).expect("blocks");
    let last = id.nsze - u64::from(nlb);
    let at = [0, (4 << 20) / bs - 1, last];
    for (i, &lba) in at.iter().enumerate() {
        c.io(0).write(1, lba, &pattern(i), false).expect("write");
    }
    c.io(0).flush(1).expect("flush");
    for (i, &lba) in at.iter().enumerate() {
        let got = c.io(0).read(1, lba, nlb).expect("read");
        assert!(got == pattern(i), "block {lba} read back differently");
    }

    // A host not on the allow-list is refused at Connect...
    let other = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
    let err = Controller::connect(addr, NQN, other, 1, 32, Default::default())
        .expect_err("a host not on the allow-list must be refused");
    assert!(err.status().is_some(), "refused with an NVMe status: {err}");
    // ...and let in once allowed, without restarting the gateway.
    ok(dir, &["nvmf", "host", "allow", NQN, other]);
    let mut c2 = eventually("the newly allowed host connects", || {
        Controller::connect(addr, NQN, other, 1, 32, Default::default()).ok()
    });
    let got = c2.io(0).read(1, 0, nlb).expect("read as the second host");
    assert!(
        got == pattern(0),
        "the second host sees the first host's write"
    );
    let _ = c2.shutdown();
    // Removed from the allow-list: refused again.
    ok(dir, &["nvmf", "host", "rm", NQN, other]);
    eventually("the removed host is refused", || {
        Controller::connect(addr, NQN, other, 1, 32, Default::default())
            .err()
            .filter(|e| e.status().is_some())
    });

    // A namespace added while connected-to shows up for new controllers.
    ok(dir, &["volume", "create", "v2", "--size", "8M"]);
    assert_eq!(ok(dir, &["nvmf", "ns", "add", NQN, "v2"]), "2\n");
    eventually("namespace 2 appears", || {
        let mut c3 = Controller::connect(addr, NQN, HOST, 0, 32, Default::default()).ok()?;
        let ids = c3.active_namespaces().ok()?;
        let _ = c3.shutdown();
        (ids == vec![1, 2]).then_some(())
    });
    let _ = c.shutdown();
}

/// The guest's part of the kernel test: the harness's own I/O test on
/// namespace 1 (discovery, two I/O queues, O_DIRECT and buffered
/// write/verify, with and without digests), then namespace 2, a snapshot:
/// the kernel must see it read-only, read exactly the snapshot's bytes and
/// fail a write. Results are `SNAPTEST ...` lines the host judges.
const KERNEL_GUEST: &str = r#"#!/bin/sh
. /test/lib.sh
nvme_discovery 10.0.2.2 "$PORT" "$HOSTNQN" ",nr_io_queues=2"
NSID=1 nvme_io_test 10.0.2.2 "$PORT" "$NQN" "$HOSTNQN" 16 ",nr_io_queues=2"
NSID=1 nvme_io_test 10.0.2.2 "$PORT" "$NQN" "$HOSTNQN" 16 ",hdr_digest,data_digest,nr_io_queues=2"
step "namespace 2: a snapshot"
nvme_connect "nqn=$NQN,transport=tcp,traddr=10.0.2.2,trsvcid=$PORT,hostnqn=$HOSTNQN,hostid=$(nvme_hostid "$HOSTNQN"),nr_io_queues=1"
nvme_find_ns 2
b=/sys/block/${NVME_BDEV#/dev/}
log "SNAPTEST ro=$(cat $b/ro) size512=$(cat $b/size)"
sha=$(dd if="$NVME_BDEV" bs=1M count="$SNAP_MB" iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
log "SNAPTEST sha=$sha"
dd if=/dev/zero of="$NVME_BDEV" bs=4k count=1 oflag=direct conv=notrunc 2>/tmp/dd.err
log "SNAPTEST write rc=$? err=$(grep -v 'records' /tmp/dd.err | tr '\n' ' ')"
nvme_delete
exit 0
"#;

/// The value of `key=` on the guest's `SNAPTEST` lines.
fn snaptest(out: &str, key: &str) -> Option<String> {
    let pat = format!("{key}=");
    out.lines()
        .filter(|l| l.contains("SNAPTEST"))
        .flat_map(|l| l.split_whitespace())
        .find_map(|w| w.strip_prefix(pat.as_str()).map(str::to_string))
}

/// The Linux kernel's NVMe/TCP initiator (in the vm-initiator guest)
/// against the gateway of a real 3-OSD cluster with a size-3 pool:
/// discovery, two I/O queues, O_DIRECT and buffered write/verify, with and
/// without header and data digests; and a snapshot exported as a second,
/// read-only namespace (`nvmf ns add NQN VOLUME@SNAPSHOT`): Identify says
/// write-protected, the kernel marks the disk read-only and reads the
/// snapshot's data, writes fail (Namespace Is Write Protected through our
/// initiator), and the volume's later writes do not reach it.
#[test]
fn the_linux_kernel_initiator_works_through_the_cluster_gateway() {
    /// The host NQN the harness presents by default.
    const VM_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
    const SNAP_MB: usize = 4;
    let (_tmp, dir) = tempdir("pontoon-nvmf-kernel-");
    let dir = dir.as_path();
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let mut up = Up::start_with(dir, 3, &["--nvmf", &addr.to_string()]);
    ok(
        dir,
        &[
            "pool",
            "create",
            "r3",
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
        &["volume", "create", "disk", "--size", "64M", "--pool", "r3"],
    );
    ok(dir, &["nvmf", "subsystem", "add", NQN]);
    ok(dir, &["nvmf", "ns", "add", NQN, "disk"]);
    ok(dir, &["nvmf", "host", "allow", NQN, VM_HOST]);
    // The gateway has the subsystem once our own initiator can connect.
    let mut c = eventually("the gateway to serve the subsystem", || {
        Controller::connect(addr, NQN, VM_HOST, 1, 32, Default::default()).ok()
    });

    // Pattern A on the volume's first MiBs, a snapshot of it, pattern B.
    let a: Vec<u8> = (0..SNAP_MB << 20)
        .map(|i| (i / 4096 * 7 + i) as u8)
        .collect();
    let b: Vec<u8> = a.iter().map(|x| !x).collect();
    for (i, chunk) in a.chunks(64 << 10).enumerate() {
        c.io(0)
            .write(1, (i * 16) as u64, chunk, false)
            .expect("write A");
    }
    c.io(0).flush(1).expect("flush");
    ok(dir, &["snap", "create", "disk@s1"]);
    for (i, chunk) in b.chunks(64 << 10).enumerate() {
        c.io(0)
            .write(1, (i * 16) as u64, chunk, false)
            .expect("write B");
    }
    fails_with(
        dir,
        &["nvmf", "ns", "add", NQN, "disk@nosuch"],
        &["snapshot", "disk@nosuch"],
    );
    fails_with(dir, &["nvmf", "ns", "add", NQN, "nosuch@s1"], &["nosuch"]);
    assert_eq!(ok(dir, &["nvmf", "ns", "add", NQN, "disk@s1"]), "2\n");
    let ns = json(dir, &["nvmf", "ns", "ls", NQN, "--json"]);
    assert_eq!(ns[1]["volume"], "disk@s1", "{ns}");
    assert_eq!(ns[1]["size_bytes"], 64 << 20, "{ns}");
    fails_with(
        dir,
        &["snap", "rm", "disk@s1"],
        &["disk@s1", "namespace 2", NQN],
    );

    let read_all = |c: &mut Controller, nsid: u32| -> Vec<u8> {
        let mut got = Vec::new();
        for i in 0..(SNAP_MB * 16) as u64 {
            got.extend(c.io(0).read(nsid, i * 16, 16).expect("read"));
        }
        got
    };
    let mut c2 = eventually("namespace 2 to be served", || {
        let mut c2 = Controller::connect(addr, NQN, VM_HOST, 1, 32, Default::default()).ok()?;
        let ids = c2.active_namespaces().ok()?;
        (ids == vec![1, 2]).then_some(c2)
    });
    let id = c2.identify_namespace(2).expect("identify namespace 2");
    assert_eq!(
        id.nsattr & 1,
        1,
        "a snapshot's namespace is write-protected: {id:?}"
    );
    assert_eq!(c2.identify_namespace(1).expect("identify 1").nsattr & 1, 0);
    assert!(
        read_all(&mut c2, 2) == a,
        "namespace 2 reads the snapshot (pattern A)"
    );
    assert!(
        read_all(&mut c2, 1) == b,
        "namespace 1 reads the volume (pattern B)"
    );
    let err = c2
        .io(0)
        .write(2, 0, &b[..4096], false)
        .expect_err("a write to a snapshot's namespace must fail");
    let status = err.status().expect("refused with an NVMe status");
    assert_eq!(
        (status.sct, status.sc),
        (0, 0x20),
        "Namespace Is Write Protected: {err}"
    );
    let _ = c2.shutdown();
    let _ = c.shutdown();

    let script_dir = tempfile::tempdir().expect("tempdir for the guest script");
    let script = script_dir.path().join("nvmf-kernel.sh");
    std::fs::write(&script, KERNEL_GUEST).expect("write the guest script");
    let r = pontoon_testtools::run_vm(
        &script.to_string_lossy(),
        &[
            format!("PORT={}", addr.port()),
            format!("NQN={NQN}"),
            format!("HOSTNQN={VM_HOST}"),
            format!("SNAP_MB={SNAP_MB}"),
        ],
        Duration::from_secs(300),
    );
    assert!(
        pontoon_testtools::vm_passed(&r),
        "the kernel's nvme-tcp initiator failed against the cluster gateway:\n{}",
        r.report()
    );
    let want = {
        let f = script_dir.path().join("a.bin");
        std::fs::write(&f, &a).expect("write pattern A");
        pontoon_testtools::sha256(&f)
    };
    assert_eq!(
        snaptest(&r.stdout, "ro").as_deref(),
        Some("1"),
        "the kernel sees the snapshot read-only:\n{}",
        r.report()
    );
    assert_eq!(
        snaptest(&r.stdout, "sha"),
        Some(want),
        "the kernel reads the snapshot's bytes:\n{}",
        r.report()
    );
    let rc = snaptest(&r.stdout, "rc").expect("the guest's write result");
    assert_ne!(
        rc,
        "0",
        "a write to the read-only disk must fail:\n{}",
        r.report()
    );
    // The kernel's writes went to the volume, never to the snapshot.
    let mut c3 =
        Controller::connect(addr, NQN, VM_HOST, 1, 32, Default::default()).expect("connect");
    assert!(
        read_all(&mut c3, 2) == a,
        "the snapshot still reads pattern A"
    );
    let _ = c3.shutdown();
    assert!(up.stop().success());
}
