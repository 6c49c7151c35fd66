//! fio through Pontoon's own ioengine (`libpontoon_fio.so`, fio's
//! `--ioengine=external:...` over libpontoon's C API) against a real local
//! three-OSD cluster, on a volume of a size-1 pool and one of a size-3 pool:
//! - scripts/build-fio-engine.sh builds the engine (PROFILE=ci) against the
//!   source of the installed fio;
//! - a write phase: 4 KiB and 64 KiB random writes at QD1 and QD32 (eight
//!   jobs, each on its own range, all in one fio process, so eight
//!   connections at once) with `--verify=crc32c --do_verify=1`, a flush
//!   every few writes and at the end; the cluster found through
//!   $PONTOON_CLUSTER;
//! - a read phase: the same ranges read back at random by a second fio
//!   (`rw=randread`, `verify=crc32c`: every block checked against the
//!   checksum written with it); the cluster given as `--pontoon_cluster`;
//! - trim: 64 KiB discards over a written range, which then reads back as
//!   zeros (`verify=pattern`, pattern 0);
//! - an unknown volume: fio fails, naming the volume;
//!
//! each fio run with `--output-format=json`: exit 0, no job error, bytes
//! moved in every job.
//!
//! Needs fio, etcd-server, and for the build: dpkg-dev, gcc and network
//! access once (the fio source is fetched with `apt-get source` into
//! target/fio-src/ and kept).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pontoon_testtools::{fio, run};
use serde_json::Value;

const MIB: u64 = 1 << 20;
/// Each volume: room for the four write jobs' ranges.
const VOLUME: u64 = 64 * MIB;
/// Longest the engine build may take (a cold one fetches fio's source and
/// builds libpontoon).
const BUILD_LIMIT: Duration = Duration::from_secs(600);
/// Longest one fio run may take.
const FIO_LIMIT: Duration = Duration::from_secs(90);

/// (name, block size, queue depth, offset, size) of the write and read jobs.
const JOBS: [(&str, &str, u32, u64, u64); 4] = [
    ("qd1-4k", "4k", 1, 0, 2 * MIB),
    ("qd32-4k", "4k", 32, 8 * MIB, 8 * MIB),
    ("qd1-64k", "64k", 1, 16 * MIB, 8 * MIB),
    ("qd32-64k", "64k", 32, 32 * MIB, 16 * MIB),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// Builds the engine (and libpontoon) with the suite's profile; its path.
fn build_engine() -> PathBuf {
    let t0 = Instant::now();
    let r = run(
        Command::new(repo().join("scripts/build-fio-engine.sh"))
            .env("PROFILE", "ci")
            .current_dir(repo()),
        BUILD_LIMIT,
    )
    .ok();
    let so = PathBuf::from(r.stdout.lines().last().unwrap_or_default().trim());
    assert!(
        so.is_file() && so.ends_with("ci/libpontoon_fio.so"),
        "build-fio-engine.sh printed no engine path\n{}",
        r.report()
    );
    eprintln!("engine {} built in {:?}", so.display(), t0.elapsed());
    so
}

/// fio with the engine, the cluster not found from the environment unless
/// the caller says so, and fio's files (none expected) kept in `cwd`.
fn fio_engine(engine: &Path, cwd: &Path) -> Command {
    let mut c = fio();
    c.current_dir(cwd)
        .env_remove("PONTOON_CLUSTER")
        .env_remove("PONTOON_ETCD")
        .arg(format!("--ioengine=external:{}", engine.display()))
        .arg("--output-format=json");
    c
}

/// Runs fio; on success, its JSON report's jobs by name.
fn fio_ok(cmd: &mut Command) -> Vec<(String, Value)> {
    let r = run(cmd, FIO_LIMIT);
    assert!(r.success(), "{} failed\n{}", r.cmd, r.report());
    // fio may print notes before the JSON document.
    let start = r.stdout.find("{\n").unwrap_or(0);
    let report: Value = serde_json::from_str(&r.stdout[start..])
        .unwrap_or_else(|e| panic!("fio printed bad JSON ({e})\n{}", r.report()));
    let jobs = report["jobs"].as_array().expect("fio jobs").clone();
    assert!(!jobs.is_empty(), "no jobs in\n{}", r.report());
    for j in &jobs {
        assert_eq!(
            j["error"],
            0,
            "fio job {} failed\n{}",
            j["jobname"],
            r.report()
        );
    }
    jobs.into_iter()
        .map(|j| (j["jobname"].as_str().unwrap_or_default().to_string(), j))
        .collect()
}

fn bytes(job: &Value, dir: &str) -> u64 {
    job[dir]["io_bytes"].as_u64().unwrap_or(0)
}

fn ios(job: &Value, dir: &str) -> u64 {
    job[dir]["total_ios"].as_u64().unwrap_or(0)
}

/// The per-job options of [`JOBS`] on volume `vol` (jobs named VOL-NAME).
fn job_args(vol: &str) -> Vec<String> {
    JOBS.iter()
        .flat_map(|(name, bs, qd, offset, size)| {
            [
                format!("--name={vol}-{name}"),
                format!("--filename={vol}"),
                format!("--bs={bs}"),
                format!("--iodepth={qd}"),
                format!("--offset={offset}"),
                format!("--size={size}"),
            ]
        })
        .collect()
}

#[test]
fn fio_runs_and_verifies_through_the_pontoon_engine() {
    let started = Instant::now();
    let engine = build_engine();
    let built = started.elapsed();

    let (_tmp, dir) = tempdir("pontoon-fio-engine-");
    let dir = dir.as_path();
    // authenticated: the engine proves client.admin's key (libpontoon
    // finds it in the cluster directory)
    let _up = Up::start_with(dir, 3, &["--ms-mode", "authenticated"]);
    eprintln!("cluster ready after {:?}", started.elapsed() - built);
    let size = VOLUME.to_string();
    for (pool, replicas) in [("size1", "1"), ("size3", "3")] {
        ok(
            dir,
            &[
                "pool",
                "create",
                pool,
                "--size",
                replicas,
                "--min-size",
                "1",
                "--pgs",
                "16",
                "--failure-domain",
                "osd",
            ],
        );
    }
    ok(
        dir,
        &["volume", "create", "v1", "--size", &size, "--pool", "size1"],
    );
    ok(
        dir,
        &["volume", "create", "v3", "--size", &size, "--pool", "size3"],
    );
    let cwd = dir.join("fio-cwd");
    std::fs::create_dir_all(&cwd).expect("fio cwd");
    let vols = ["v1", "v3"];

    // Write phase, cluster from $PONTOON_CLUSTER: eight concurrent jobs,
    // each verifying what it wrote; every 7th I/O a flush, and one at the end.
    let t0 = Instant::now();
    let mut cmd = fio_engine(&engine, &cwd);
    cmd.env("PONTOON_CLUSTER", dir).args([
        "--rw=randwrite",
        "--verify=crc32c",
        "--do_verify=1",
        "--fsync=7",
        "--end_fsync=1",
    ]);
    for v in vols {
        cmd.args(job_args(v));
    }
    let jobs = fio_ok(&mut cmd);
    assert_eq!(jobs.len(), 8, "{jobs:?}");
    for (name, j) in &jobs {
        let size = JOBS
            .iter()
            .find(|(n, ..)| name.ends_with(n))
            .map(|j| j.4)
            .expect("a job of ours");
        assert_eq!(bytes(j, "write"), size, "{name} wrote: {j:#}");
        assert_eq!(bytes(j, "read"), size, "{name} verified: {j:#}");
        assert!(ios(j, "sync") > 0, "{name} flushed: {j:#}");
    }
    eprintln!("write+verify phase: {:?}", t0.elapsed());

    // Read phase, cluster as an engine option: every block read back at
    // random and checked against the checksum written with it.
    let t0 = Instant::now();
    let mut cmd = fio_engine(&engine, &cwd);
    cmd.arg(format!("--pontoon_cluster={}", dir.display()))
        .args(["--rw=randread", "--verify=crc32c"]);
    for v in vols {
        cmd.args(job_args(v));
    }
    let jobs = fio_ok(&mut cmd);
    assert_eq!(jobs.len(), 8, "{jobs:?}");
    for (name, j) in &jobs {
        let size = JOBS
            .iter()
            .find(|(n, ..)| name.ends_with(n))
            .map(|j| j.4)
            .expect("a job of ours");
        assert_eq!(bytes(j, "read"), size, "{name} read: {j:#}");
        assert_eq!(bytes(j, "write"), 0, "{name}: {j:#}");
    }
    eprintln!("randread verify phase: {:?}", t0.elapsed());

    // Trim: discard the 64 KiB QD32 range of both volumes, which then
    // reads back as zeros.
    let t0 = Instant::now();
    let (_, _, _, offset, len) = JOBS[3];
    for (rw, extra) in [
        ("randtrim", vec!["--iodepth=8"]),
        (
            "read",
            vec!["--iodepth=16", "--verify=pattern", "--verify_pattern=0x00"],
        ),
    ] {
        let mut cmd = fio_engine(&engine, &cwd);
        cmd.arg(format!("--pontoon_cluster={}", dir.display()))
            .arg(format!("--rw={rw}"))
            .args([
                "--bs=64k",
                &format!("--offset={offset}"),
                &format!("--size={len}"),
            ])
            .args(extra);
        for v in vols {
            cmd.args([format!("--name={v}-{rw}"), format!("--filename={v}")]);
        }
        for (name, j) in fio_ok(&mut cmd) {
            let dir = if rw == "read" { "read" } else { "trim" };
            assert_eq!(ios(&j, dir), len / (64 << 10), "{name}: {j:#}");
            assert_eq!(bytes(&j, dir), len, "{name}: {j:#}");
        }
    }
    eprintln!("trim and zero check: {:?}", t0.elapsed());

    // A key rotated under load: fio runs as client.fio (its keyring file
    // named by PONTOON_NAME/PONTOON_KEYRING), the key is rotated into that
    // file, then the old key is ended, which cuts fio's open connections.
    // libpontoon follows the file, so it reconnects with the new key and no
    // I/O fails (without following, the reconnect is refused).
    let t0 = Instant::now();
    let ring = dir.join("fio.keyring");
    let ring_s = ring.to_str().expect("utf-8 path");
    ok(
        dir,
        &[
            "auth",
            "add",
            "client.fio",
            "allow",
            "rw",
            "pool=size3",
            "-o",
            ring_s,
        ],
    );
    let mut cmd = fio_engine(&engine, &cwd);
    cmd.env("PONTOON_NAME", "client.fio")
        .env("PONTOON_KEYRING", &ring)
        .arg(format!("--pontoon_cluster={}", dir.display()))
        .args([
            "--name=rotate",
            "--filename=v3",
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=8",
            "--size=16M",
            "--time_based",
            "--runtime=8s",
            "--verify=crc32c",
            "--do_verify=1",
        ]);
    let load = std::thread::spawn(move || run(&mut cmd, FIO_LIMIT));
    std::thread::sleep(Duration::from_secs(2));
    let before = std::fs::read_to_string(&ring).expect("fio's keyring");
    ok(
        dir,
        &[
            "auth",
            "rotate",
            "client.fio",
            "--grace",
            "1h",
            "-o",
            ring_s,
        ],
    );
    assert_ne!(std::fs::read_to_string(&ring).expect("keyring"), before);
    // The engine looks at its keyring once a second.
    std::thread::sleep(Duration::from_secs(3));
    ok(dir, &["auth", "rotate", "client.fio", "--finish"]);
    let r = load.join().expect("fio thread");
    assert!(
        r.success(),
        "fio failed across a rotation of its key\n{}",
        r.report()
    );
    eprintln!("key rotation under load: {:?}", t0.elapsed());

    // No local file of a volume's name was made (fio's own verify state
    // files may be there).
    for v in vols {
        assert!(!cwd.join(v).exists(), "fio made a local file {v}");
    }

    // An unknown volume: fio fails, and says which volume and why.
    let r = run(
        fio_engine(&engine, &cwd)
            .arg(format!("--pontoon_cluster={}", dir.display()))
            .args([
                "--name=missing",
                "--filename=no-such-volume",
                "--rw=randread",
                "--bs=4k",
                "--size=1M",
            ]),
        FIO_LIMIT,
    );
    assert!(
        !r.success(),
        "fio on an unknown volume succeeded\n{}",
        r.report()
    );
    assert!(
        r.stderr.contains("cannot open volume 'no-such-volume'") && r.stderr.contains("not found"),
        "fio's error does not name the missing volume\n{}",
        r.report()
    );
    // No cluster at all: a clear message too.
    let r = run(
        fio_engine(&engine, &cwd).args([
            "--name=nocluster",
            "--filename=v1",
            "--rw=randread",
            "--bs=4k",
            "--size=1M",
        ]),
        FIO_LIMIT,
    );
    assert!(
        !r.success(),
        "fio without a cluster succeeded\n{}",
        r.report()
    );
    assert!(
        r.stderr.contains("cannot connect to cluster"),
        "fio's error does not say it found no cluster\n{}",
        r.report()
    );
    eprintln!("total {:?} (engine build {built:?})", started.elapsed());
}
